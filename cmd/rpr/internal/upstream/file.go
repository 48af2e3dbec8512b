package upstream

import (
	"encoding/json"
	"fmt"
	"os"
)

// File is the JSON form of static tables (rpr egress --routes-file): the
// routes `rpr upstreams set` writes to Redis, by kind and name.
//
//	{"http": {"orders": {"path_prefix": "/orders", "upstream": "http://10.0.0.5:8080"}},
//	 "grpc": {"greeter": {"path_prefix": "/helloworld.Greeter/", "upstream": "grpc://10.0.0.6:9090"}}}
type File struct {
	HTTP map[string]Route `json:"http,omitempty"`
	GRPC map[string]Route `json:"grpc,omitempty"`
}

// ReadFile reads static tables from path. Unlike a table in Redis, a file
// with an invalid route is refused whole: it is checked before the
// process starts.
func ReadFile(path string) (httpTable, grpcTable *Table, err error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read the routes file: %w", err)
	}
	var f File
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, nil, fmt.Errorf("routes file %s: want JSON of the form {\"http\": {\"name\": {\"path_prefix\": \"/api\", \"upstream\": \"http://host:port\"}}, \"grpc\": {...}}: %w", path, err)
	}
	httpTable, err = fileTable(path, HTTP, f.HTTP)
	if err != nil {
		return nil, nil, err
	}
	grpcTable, err = fileTable(path, GRPC, f.GRPC)
	if err != nil {
		return nil, nil, err
	}
	return httpTable, grpcTable, nil
}

func fileTable(path string, kind Kind, byName map[string]Route) (*Table, error) {
	routes := make([]Route, 0, len(byName))
	for name, r := range byName {
		r.Name = name
		if err := r.Check(kind); err != nil {
			return nil, fmt.Errorf("routes file %s: %s: %w", path, kind, err)
		}
		routes = append(routes, r)
	}
	return NewTable(kind, 0, routes), nil
}

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Item is one line of the stock.
type Item struct {
	SKU  string `json:"sku"`
	Name string `json:"name"`
	Qty  int    `json:"qty"`
}

// inventory is the service's state: the stock, and the orders taken by
// idempotency key.
type inventory struct {
	mu     sync.Mutex
	items  map[string]*Item
	orders map[string]bool
	tick   time.Duration
}

func newInventory() *inventory {
	return &inventory{
		items: map[string]*Item{
			"bolt-m6": {SKU: "bolt-m6", Name: "M6 bolt", Qty: 1200},
			"nut-m6":  {SKU: "nut-m6", Name: "M6 nut", Qty: 900},
		},
		orders: map[string]bool{},
		tick:   time.Second,
	}
}

func (inv *inventory) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /inventory/items", inv.list)
	mux.HandleFunc("GET /inventory/items/{sku}", inv.get)
	mux.HandleFunc("POST /inventory/orders", inv.order)
	mux.HandleFunc("GET /inventory/watch", inv.watch)
	return mux
}

func (inv *inventory) snapshot() []Item {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	out := make([]Item, 0, len(inv.items))
	for _, it := range inv.items {
		out = append(out, *it)
	}
	slices.SortFunc(out, func(a, b Item) int { return strings.Compare(a.SKU, b.SKU) })
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (inv *inventory) list(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, inv.snapshot())
}

func (inv *inventory) get(w http.ResponseWriter, r *http.Request) {
	inv.mu.Lock()
	it, ok := inv.items[r.PathValue("sku")]
	var item Item
	if ok {
		item = *it
	}
	inv.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no item " + r.PathValue("sku")})
		return
	}
	writeJSON(w, http.StatusOK, item)
}

// order takes qty items of sku out of the stock, once per Idempotency-Key.
func (inv *inventory) order(w http.ResponseWriter, r *http.Request) {
	var o struct {
		SKU string `json:"sku"`
		Qty int    `json:"qty"`
	}
	if err := json.NewDecoder(r.Body).Decode(&o); err != nil || o.Qty < 1 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"sku": "...", "qty": n} with n >= 1`})
		return
	}
	key := r.Header.Get("Idempotency-Key")
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if key != "" && inv.orders[key] {
		writeJSON(w, http.StatusOK, map[string]string{"status": "already taken", "key": key})
		return
	}
	it, ok := inv.items[o.SKU]
	switch {
	case !ok:
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": "no item " + o.SKU})
		return
	case it.Qty < o.Qty:
		writeJSON(w, http.StatusConflict, map[string]string{"error": fmt.Sprintf("only %d of %s left", it.Qty, o.SKU)})
		return
	}
	it.Qty -= o.Qty
	if key != "" {
		inv.orders[key] = true
	}
	writeJSON(w, http.StatusCreated, map[string]any{"status": "taken", "sku": o.SKU, "left": it.Qty})
}

// watch streams the stock as server-sent events, one per tick, until the
// caller goes away.
func (inv *inventory) watch(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	t := time.NewTicker(inv.tick)
	defer t.Stop()
	for {
		b, _ := json.Marshal(inv.snapshot())
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
	}
}

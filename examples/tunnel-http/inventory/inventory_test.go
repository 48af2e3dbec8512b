package main

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestInventory(t *testing.T) {
	inv := newInventory()
	inv.tick = 10 * time.Millisecond
	s := httptest.NewServer(inv.routes())
	defer s.Close()

	order := func(key string) int {
		req, _ := http.NewRequest("POST", s.URL+"/inventory/orders", strings.NewReader(`{"sku": "nut-m6", "qty": 100}`))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if a, b := order("o-1"), order("o-1"); a != http.StatusCreated || b != http.StatusOK {
		t.Errorf("order twice with one key: %d, %d", a, b)
	}
	if got := inv.items["nut-m6"].Qty; got != 800 {
		t.Errorf("stock %d after one order of 100, want 800", got)
	}
	resp, err := http.Get(s.URL + "/inventory/watch")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if !strings.HasPrefix(line, `data: [{"sku":"bolt-m6"`) {
		t.Errorf("first event %q", line)
	}
}

package rpc

import (
	"errors"
	"testing"
)

func TestPoolSharesConnectionsAndCloses(t *testing.T) {
	p := NewPool()
	a1, err := p.Conn("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := p.Conn("127.0.0.1:1")
	b, _ := p.Conn("127.0.0.1:2")
	if a1 != a2 {
		t.Fatal("two connections to one address")
	}
	if a1 == b {
		t.Fatal("one connection for two addresses")
	}
	p.Close()
	if _, err := p.Conn("127.0.0.1:1"); !errors.Is(err, ErrPoolClosed) {
		t.Fatalf("Conn after Close: %v, want ErrPoolClosed", err)
	}
}

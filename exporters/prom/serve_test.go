package prom_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/trainscope/trainscope/exporters/prom"
)

// A client that sends a request with a body and stops sending it
// (slowloris) does not hold a connection for ever: the server closes it
// once the read timeout passes. Before, net/http waited without a
// deadline for the rest of the body before it answered, and kept the
// connection for good.
func TestServeClosesStalledRequestBody(t *testing.T) {
	e, err := prom.New(nil, prom.WithHostname(host), prom.WithReadTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	addr, err := e.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Headers in full, then 1 byte of a 1000-byte body.
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\na"); err != nil {
		t.Fatal(err)
	}
	// A generous bound: the server should close within 200 ms; a server
	// that never does fails here, not by hanging.
	if err := c.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to the scrape: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	// Then the server must close the connection rather than wait for the
	// rest of the body.
	_, err = br.ReadByte()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the connection of a client that stopped sending its request body was still open after 30 s")
	}
	if err == nil {
		t.Fatal("the server sent more than one answer")
	}
}

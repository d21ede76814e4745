package tcpack_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/reprise-dev/reprise/stream/tcpack"
)

// A server writes an answer, marks its end, and learns whether the client's
// TCP acknowledged it — here a client that reads it all.
func ExampleTake() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		c, _ := net.Dial("tcp", ln.Addr().String())
		_, _ = io.Copy(io.Discard, c)
	}()
	conn, _ := ln.Accept()
	defer conn.Close()
	_, _ = conn.Write([]byte("the answer"))

	m, err := tcpack.Take(conn)
	if err != nil {
		fmt.Println("cannot tell:", err)
		return
	}
	defer func() { _ = m.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println(m.Wait(ctx, 5*time.Second))
	// Output: acked
}

// Command healthcheck is the container health probe of the reprise image,
// whose distroless base has no shell, wget or curl. It GETs a URL and exits
// 0 on a 2xx answer, 1 otherwise.
//
//	healthcheck http://127.0.0.1:8080/readyz
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	url := "http://127.0.0.1:8080/readyz"
	if len(os.Args) > 1 {
		url = os.Args[1]
	}
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url) //nolint:gosec // the URL is the operator's own argument
	if err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		fmt.Fprintln(os.Stderr, "healthcheck:", url, resp.Status)
		os.Exit(1)
	}
}

package otel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"
)

// probeTimeout bounds the probe of an OTLP/HTTP endpoint: one that does
// not answer within it is left to the exports, which count their
// failures.
const probeTimeout = 3 * time.Second

// errNotOTLP is what New returns, wrapped, for an HTTP endpoint whose
// answer to an export shows it is no OTLP receiver.
var errNotOTLP = errors.New("not an OTLP/HTTP receiver")

// probeHTTP sends target an empty OTLP/HTTP export (an empty
// ExportTraceServiceRequest: zero bytes of protobuf, no spans) and
// returns an error wrapping errNotOTLP where the answer shows that no
// OTLP receiver is there: a success with a body that is neither protobuf
// nor JSON (a web page: a UI's port, a proxy's login page), or a
// redirect. The OTLP exporter takes both for a delivery, so every span
// would be counted delivered and none would arrive. An endpoint that
// cannot be reached, refuses the request or fails is no proof (it may
// come up, or take spans it refused empty): nil, and the exports count
// their failures as before. Redirects are not followed.
func probeHTTP(ctx context.Context, target string, headers map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(nil))
	if err != nil {
		return nil
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	client := &http.Client{
		Transport: http.DefaultTransport.(*http.Transport).Clone(),
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return fmt.Errorf("%w: %s answers an export with %s to %q", errNotOTLP, target, resp.Status, resp.Header.Get("Location"))
	case resp.StatusCode < 200 || resp.StatusCode > 299 || len(bytes.TrimSpace(body)) == 0:
		return nil
	}
	ct := resp.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	switch mt {
	case "application/x-protobuf", "application/json":
		return nil
	}
	what := fmt.Sprintf("%s, %q", resp.Status, ct)
	if mt == "text/html" {
		what += ", a web page"
	}
	return fmt.Errorf("%w: %s answers an export with %s, which the OTLP exporter would count as spans delivered (a UI's port? Jaeger's UI is on 16686, its OTLP/HTTP receiver on 4318)", errNotOTLP, target, what)
}

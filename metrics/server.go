package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves /metrics, /healthz (liveness) and /readyz (readiness).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Timeout: ObserveTimeout + 2*time.Second,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeProbe(w, m.src.Health())
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), ObserveTimeout)
		defer cancel()
		writeProbe(w, m.src.Ready(ctx))
	})
	return mux
}

// writeProbe answers a probe: 200 "ok", or 503 with the reason on one
// line (without the newlines of a multi-error).
func writeProbe(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(strings.Join(strings.Fields(err.Error()), " ") + "\n"))
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// Serve serves m on ln until ctx ends, then shuts the server down (waiting
// up to a second for scrapes in progress) and returns. ln is closed.
func (m *Metrics) Serve(ctx context.Context, ln net.Listener) error {
	return ServeHandler(ctx, ln, m.Handler())
}

// serverLimits are the http.Server's bounds on one connection: a request
// must arrive whole within Read (its header within ReadHeader), its
// response be written within Write (longer than a dashboard page's store
// reads and a scrape), and a keep-alive connection is closed after Idle
// without a request.
type serverLimits struct {
	ReadHeader, Read, Write, Idle time.Duration
	MaxHeaderBytes                int
}

var defaultLimits = serverLimits{ReadHeader: 5 * time.Second, Read: 15 * time.Second, Write: 30 * time.Second, Idle: 30 * time.Second, MaxHeaderBytes: 64 << 10}

// ServeHandler is Serve for a handler that serves more than m (the
// daemon adds its dashboard). It holds at most ConnCap connections.
func ServeHandler(ctx context.Context, ln net.Listener, h http.Handler) error {
	return serveHandler(ctx, newConnLimit(ln, ConnCap()), h, defaultLimits)
}

func serveHandler(ctx context.Context, ln *connLimit, h http.Handler, lim serverLimits) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadHeader,
		ReadTimeout:       lim.Read,
		WriteTimeout:      lim.Write,
		IdleTimeout:       lim.Idle,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ConnState:         ln.track,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

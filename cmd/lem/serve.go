package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"lem/server"
)

// defaultAddr is where lem serve listens unless told otherwise.
const defaultAddr = "127.0.0.1:36911"

func newServeCmd() *cobra.Command {
	var (
		rf         runFlags
		addr       string
		apiKey     string
		alias      string
		cors       []string
		maxQueue   int
		maxBody    int64
		drain      time.Duration
		logContent bool
		logFormat  string
	)
	cmd := &cobra.Command{
		Use:   "serve [PATH]",
		Short: "Serve a model over HTTP (OpenAI API)",
		Long: `Serve loads the model at PATH (with no PATH, lem-tiny, the small chat model
built into lem) and answers the OpenAI API on --addr:
POST /v1/chat/completions, /v1/completions and /v1/responses, GET /v1/models.
GET /health and GET /metrics (Prometheus) are there too.

Requests wait in a bounded queue (--max-queue) and run one at a time; the
model keeps its last conversation in memory, so a request that continues it
prefills only what is new. With --api-key (or LEM_API_KEY) every API route
needs "Authorization: Bearer KEY" or "x-api-key: KEY"; /health stays open.
SIGINT or SIGTERM stops taking requests and lets running ones finish for
up to --drain.`,
		Example: `  lem serve
  lem serve ../shared/fixtures/chat-model
  lem serve model-dir --model-alias qwen3 --addr 0.0.0.0:8080 --api-key secret
  curl localhost:36911/v1/chat/completions -d '{"model":"chat-model","messages":[{"role":"user","content":"Hi"}]}'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if apiKey == "" {
				apiKey = os.Getenv("LEM_API_KEY")
			}
			var h slog.Handler
			switch logFormat {
			case "json":
				h = slog.NewJSONHandler(cmd.ErrOrStderr(), nil)
			case "text":
				h = slog.NewTextHandler(cmd.ErrOrStderr(), nil)
			default:
				return fmt.Errorf("--log-format: want json or text, got %q", logFormat)
			}
			log := slog.New(h)
			if !isLoopback(addr) && apiKey == "" {
				log.Warn("listening beyond this machine without an API key: anyone who can reach " + addr + " can use the model; set --api-key or LEM_API_KEY")
			}
			em, err := openModelArg(args, rf)
			if err != nil {
				return err
			}
			defer em.Close()
			if len(args) == 0 {
				log.Info(tinyNote("serve"))
			}
			id := alias
			if id == "" {
				id = filepath.Base(filepath.Clean(em.Name))
			}
			m, err := server.NewModel(id, em, server.ModelOptions{Context: rf.ctx})
			if err != nil {
				return err
			}
			s, err := server.New(server.Config{
				APIKey: apiKey, CORSOrigins: cors, MaxQueue: maxQueue, MaxBodyBytes: maxBody,
				LogContent: logContent, Logger: log,
			}, m)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log.Info("serving", "model", id, "path", em.Name, "backend", em.Backend.Name(),
				"context", m.ContextLength(), "url", "http://"+ln.Addr().String())
			return s.Serve(ctx, ln, drain)
		},
	}
	rf.register(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVar(&addr, "addr", defaultAddr, "address to listen on")
	fs.StringVar(&apiKey, "api-key", "", "require this API key on API routes (default $LEM_API_KEY)")
	fs.StringVar(&alias, "model-alias", "", "model id clients use (default: the base name of PATH)")
	fs.StringSliceVar(&cors, "cors-origin", nil, "allow browser calls from this origin (repeatable; * for any)")
	fs.IntVar(&maxQueue, "max-queue", server.DefaultMaxQueue, "requests that may wait behind the running one; more get 429")
	fs.Int64Var(&maxBody, "max-body", server.DefaultMaxBodyBytes, "largest request body in bytes; larger gets 413")
	fs.DurationVar(&drain, "drain", server.DefaultDrain, "on shutdown, how long running requests may take to finish")
	fs.BoolVar(&logContent, "log-content", false, "log prompts and outputs (off: only counts and timings)")
	fs.StringVar(&logFormat, "log-format", "json", "request log format: json or text")
	return cmd
}

// isLoopback reports whether addr listens only on this machine.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

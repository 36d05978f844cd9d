package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/server"
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
		hosts      []string
		limits     server.Config
		maxQueue   int
		parallel   int
		draft      int
		kvMemory   byteSize
		maxBody    int64
		drain      time.Duration
		logContent bool
		wf         welfareFlags
		logFormat  string
		policyPath string
		auditPath  string
		mediator   string
		hp         hostPort
		modelDirs  []string
		roots      []string
		memLimit   byteSize
		configPath string
		keepAlive  time.Duration
		adminKey   string
	)
	cmd := &cobra.Command{
		Use:   "serve [PATH]",
		Short: "Serve a model over HTTP (OpenAI, Anthropic and Ollama APIs)",
		Long: `Serve loads the model at PATH (with no PATH, lem-tiny, the small chat model
built into lem) and answers three APIs on --addr:
  OpenAI:    POST /v1/chat/completions, /v1/completions, /v1/responses;
             GET /v1/models
  Anthropic: POST /v1/messages, /v1/messages/count_tokens
  Ollama:    POST /api/chat, /api/generate, /api/show;
             GET /api/tags, /api/ps, /api/version
GET /health and GET /metrics (Prometheus) are there too.

Up to --parallel requests run at once, their sequences advancing together in
one batch (by default as many as the KV cache's memory allows); more wait in
a bounded queue (--max-queue), and beyond it get 429. The KV cache is one pool
of blocks of --kv-memory (by default a share of the free memory); full
blocks stay after their requests end, so that any request that shares a
prefix with an earlier one (a conversation's history, an agent's system
prompt) prefills only what is new. A decoding sequence also runs, in the
same step, the tokens that followed its last few tokens where they occurred
before in its prompt or output (--draft): each that the model then picks
is a step saved, and the output is the same as without. With --api-key (or LEM_API_KEY) every API route
needs "Authorization: Bearer KEY" or "x-api-key: KEY"; /health stays open.
SIGINT or SIGTERM stops taking requests and lets running ones finish for
up to --drain; a second one exits at once. The port is bound before the
model loads, so that a busy one is reported at once. When one model is
served, requests may name it by any model name (as llama-server accepts);
with --model-alias it also has the name clients expect in listings.

Logs are lines for people on a terminal and JSON objects elsewhere
(--log-format); durations are in milliseconds (duration_ms).

Against web pages: lem answers only requests addressed to localhost, a
loopback address or, when --addr is not a loopback address, any IP address
and this machine's host name (and the host of --addr); a request for any
other Host gets 403, so that a page whose domain is made to resolve to this
machine (DNS rebinding) cannot use the model. Name the others, such as the
name of a reverse proxy, with --allowed-hosts ("*.example.com" for a domain,
"*" for any: no protection). A request with an Origin header, as browsers
send from web pages, gets 403 unless the origin is one of --cors-origin or
lem's own; requests without one (curl, the SDKs, scripts) are unaffected.

Against slow and many clients: headers must arrive within --header-timeout
and bodies within --body-timeout (a streamed response may take longer),
idle connections close after --idle-timeout, and headers beyond
--max-header-bytes get 431. At --max-connections open connections, those
idle between requests are closed to make room, and new clients wait to be
accepted until one closes.

--welfare (off unless given) turns on the welfare guard for chat requests
(not raw completions): a user message scored as hostile (insults and
slurs after folding leetspeak, shouting, threats, or hostility sustained
over the recent user turns) is shown to the served model with a fixed
instruction, in a short greedy generation of its own, to proceed,
rephrase the message or pause the conversation with a friendly reply; an
answer that does not parse proceeds unchanged. Triggers go to
--welfare-audit (JSON lines) or the log, without the user's text unless
--welfare-audit-text. The model's replies are never checked.`,
		Example: `  lem serve
  lem serve ../shared/fixtures/chat-model
  lem serve model-dir --model-alias qwen3 --addr 0.0.0.0:8080 --api-key secret
  lem serve --allowed-hosts lem.example.com --cors-origin https://app.example.com
  curl localhost:36911/v1/chat/completions -d '{"model":"chat-model","messages":[{"role":"user","content":"Hi"}]}'`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if parallel < 0 {
				return fmt.Errorf("--parallel: want 0 (chosen from memory) or a positive number of sequences, got %d", parallel)
			}
			if apiKey == "" {
				apiKey = os.Getenv("LEM_API_KEY")
			}
			var err error
			if addr, err = hp.addr(cmd.Flags(), addr); err != nil {
				return err
			}
			log, err := newLogger(cmd.ErrOrStderr(), logFormat)
			if err != nil {
				return err
			}
			// The policy is compiled before anything is served: a
			// server never runs unguarded.
			var policy *server.Policy
			if policyPath != "" {
				p, err := server.LoadPolicy(policyPath)
				if err != nil {
					return err
				}
				if mediator != "" {
					p.Mediator = mediator
				}
				if auditPath != "" {
					f, err := os.OpenFile(auditPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
					if err != nil {
						return fmt.Errorf("--policy-audit: %w", err)
					}
					defer f.Close()
					p.Audit = f
				}
				policy = p
			} else if auditPath != "" || mediator != "" {
				return fmt.Errorf("--policy-audit and --policy-mediator need --policy")
			}
			welfare, closeAudit, err := wf.config()
			if err != nil {
				return err
			}
			defer closeAudit()
			if !isLoopback(addr) && apiKey == "" {
				log.Warn("listening beyond this machine without an API key: anyone who can reach " + addr + " can use the model; set --api-key or LEM_API_KEY")
			}
			// Bind first, so that a busy port is found before a model of
			// gigabytes has loaded.
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("--addr %s: %w", addr, err)
			}
			defer ln.Close()
			if len(args) > 1 || len(modelDirs) > 0 || configPath != "" {
				return serveMany(cmd, ln, log, args, modelDirs, roots, int64(memLimit), keepAlive, adminKey, apiKey, manyServe{
					rf: rf, parallel: parallel, draft: draft, kv: int64(kvMemory), limits: limits, cors: cors, hosts: hosts, addr: addr,
					maxQueue: maxQueue, maxBody: maxBody, drain: drain, logContent: logContent, policy: policy, welfare: welfare, config: configPath})
			}
			var (
				m             *server.Model
				id            string
				name, backend string
			)
			if enc, err := openEncoderArg(args, rf); err != nil {
				return err
			} else if enc != nil {
				// An encoder model (BERT, XLM-RoBERTa, ModernBERT) serves
				// embeddings and, with a classification head, reranking.
				defer enc.Close()
				id = cmp.Or(alias, filepath.Base(filepath.Clean(enc.Name)))
				if m, err = server.NewEncoderModel(id, enc, server.ModelOptions{Context: rf.ctx}); err != nil {
					return err
				}
				name, backend = enc.Name, enc.Backend.Name()
			} else {
				em, err := openModelArg(args, rf)
				if err != nil {
					return err
				}
				defer em.Close()
				if len(args) == 0 {
					log.Info(tinyNote("serve"))
				}
				id = alias
				if id == "" && len(args) > 0 && em.Name != args[0] {
					id = args[0] // a name, not a path
				}
				if id == "" {
					id = filepath.Base(filepath.Clean(em.Name))
				}
				if m, err = server.NewModel(id, em, server.ModelOptions{Context: rf.ctx, Parallel: parallel, KVBytes: int64(kvMemory), Draft: draft}); err != nil {
					return err
				}
				name, backend = em.Name, em.Backend.Name()
			}
			cfg := limits
			// On the command line 0 means none; in server.Config, the default.
			for _, d := range []*time.Duration{&cfg.HeaderTimeout, &cfg.BodyTimeout, &cfg.IdleTimeout} {
				if *d == 0 {
					*d = -1
				}
			}
			if cfg.MaxConnections == 0 {
				cfg.MaxConnections = -1
			}
			cfg.APIKey, cfg.CORSOrigins, cfg.MaxQueue, cfg.MaxBodyBytes = apiKey, cors, maxQueue, maxBody
			cfg.AllowedHosts = append(hosts, addrName(addr)...)
			cfg.LogContent, cfg.Logger = logContent, log
			cfg.Version = releaseVersion()
			cfg.Policy = policy
			cfg.Welfare = welfare
			s, err := server.New(cfg, m)
			if err != nil {
				m.Close()
				return err
			}
			ctx := shutdownOnSignal(cmd.Context(), log, cmd.ErrOrStderr())
			log.Info("serving", "model", id, "path", name, "backend", backend,
				"context", m.ContextLength(), "parallel", m.Parallel(), "url", "http://"+ln.Addr().String())
			return s.Serve(ctx, ln, drain)
		},
	}
	rf.register(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVar(&addr, "addr", defaultAddr, "address to listen on (or --host and --port)")
	hp.register(fs)
	fs.StringVar(&apiKey, "api-key", "", "require this API key on API routes (default $LEM_API_KEY)")
	fs.StringVar(&alias, "model-alias", "", "model id clients use (default: the base name of PATH)")
	fs.StringSliceVar(&cors, "cors-origin", nil, "allow browser calls from this origin, as http://host:port (repeatable; * for any)")
	fs.StringSliceVar(&hosts, "allowed-hosts", nil, "also answer requests for these Host names (comma-separated or repeated; *.domain for a domain, * for any)")
	fs.DurationVar(&limits.HeaderTimeout, "header-timeout", server.DefaultHeaderTimeout, "longest time to receive a request's headers (0: none)")
	fs.DurationVar(&limits.BodyTimeout, "body-timeout", server.DefaultBodyTimeout, "longest time to receive a request's body; slower gets 408 (0: none)")
	fs.DurationVar(&limits.IdleTimeout, "idle-timeout", server.DefaultIdleTimeout, "close keep-alive connections idle this long (0: never)")
	fs.IntVar(&limits.MaxHeaderBytes, "max-header-bytes", server.DefaultMaxHeaderBytes, "largest request headers in bytes; larger get 431")
	fs.IntVar(&limits.MaxConnections, "max-connections", server.DefaultMaxConnections, "most connections open at once; at the limit idle ones are closed and new ones wait (0: no limit)")
	fs.IntVar(&maxQueue, "max-queue", server.DefaultMaxQueue, "requests that may wait while --parallel run; more get 429")
	fs.IntVar(&parallel, "parallel", 0, "sequences that run at once, in one batch (0: as many as --kv-memory allows)")
	fs.Var(&kvMemory, "kv-memory", "memory of the paged KV cache, as 4GiB or 512MiB (0: a share of the free memory)")
	registerKVType(fs, &rf.kvType)
	fs.IntVar(&draft, "draft", 0, "speculative decoding by prompt lookup: the most draft tokens a sequence runs per step (0: 7 on the CPU, none on a GPU; -1: none)")
	fs.Int64Var(&maxBody, "max-body", server.DefaultMaxBodyBytes, "largest request body in bytes; larger gets 413")
	fs.DurationVar(&drain, "drain", server.DefaultDrain, "on shutdown, how long running requests may take to finish")
	fs.StringSliceVar(&modelDirs, "models", nil, "serve every model of this directory, loaded on first use (repeatable; \"default\": lem's models directory)")
	fs.StringSliceVar(&roots, "model-root", nil, "a directory whose models the admin API may load by path (repeatable; the models directory and --models dirs are roots too)")
	fs.Var(&memLimit, "memory-limit", "with several models, the most memory the loaded ones may take (weights and KV), as 24GiB; the least recently used idle model is unloaded to make room (0: no limit)")
	fs.DurationVar(&keepAlive, "keep-alive", server.DefaultModelKeepAlive, "with several models, how long a model stays loaded after its last request (negative: forever; requests may set keep_alive)")
	fs.StringVar(&configPath, "config", "", "a JSON file of model aliases and per-model defaults (sampling, context, system prompt, keep_alive, pinned); see the README")
	fs.StringVar(&adminKey, "admin-key", "", "key of the /v1/admin/ routes (default $LEM_ADMIN_KEY, else one generated at start, written to the data directory and printed once)")
	fs.BoolVar(&logContent, "log-content", false, "log prompts and outputs (off: only counts and timings)")
	wf.register(fs)
	fs.StringVar(&logFormat, "log-format", "auto", "log format: text (lines for people), json (one object a line) or auto (text on a terminal, else json)")
	fs.StringVar(&policyPath, "policy", "", "filter every reply through the policy in this JSON file (see README: Outbound policy)")
	fs.StringVar(&auditPath, "policy-audit", "", "append a JSON line per policy action to this file")
	fs.StringVar(&mediator, "policy-mediator", "", "URL rewrite rules send their matches to (overrides the file's mediator)")
	return cmd
}

// addrName returns the host of addr when it is a name other than
// localhost, which requests may then carry as their Host.
func addrName(addr string) []string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" || strings.EqualFold(host, "localhost") || net.ParseIP(host) != nil {
		return nil
	}
	return []string{host}
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

// newLogger returns the logger of lem serve on w in format: "json", "text",
// or "auto" (text when w is a terminal, else JSON). Text lines are for
// people: a short time, the level and the message, then the attributes.
func newLogger(w io.Writer, format string) (*slog.Logger, error) {
	if format == "auto" {
		format = "json"
		if writesToTerminal(w) {
			format = "text"
		}
	}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{ReplaceAttr: msDurations})), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime {
				return slog.String(slog.TimeKey, a.Value.Time().Format("15:04:05.000"))
			}
			return msDurations(groups, a)
		}})), nil
	}
	return nil, fmt.Errorf("--log-format: want auto, text or json, got %q", format)
}

// msDurations writes a duration attribute in milliseconds, its key given
// the suffix _ms.
func msDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Float64(a.Key+"_ms", float64(a.Value.Duration().Microseconds())/1000)
	}
	return a
}

// writesToTerminal reports whether w is a terminal (not merely a
// character device such as /dev/null).
func writesToTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// shutdownOnSignal returns a context that ends at the first SIGINT or
// SIGTERM, which starts a graceful shutdown; a second one exits the
// process at once, with status 130.
func shutdownOnSignal(parent context.Context, log *slog.Logger, w io.Writer) context.Context {
	ctx, cancel := context.WithCancel(parent)
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case s := <-sig:
			log.Info("shutting down on " + s.String() + ": waiting for running requests; press Ctrl-C again to exit now")
			cancel()
		case <-parent.Done():
			signal.Stop(sig)
			cancel()
			return
		}
		s := <-sig
		fmt.Fprintf(w, "lem: %s again: exiting now\n", s)
		os.Exit(130)
	}()
	return ctx
}

// openEncoderArg opens the model args[0] names when it is an encoder
// directory (BERT, XLM-RoBERTa, ModernBERT), which serves embeddings and
// reranking rather than generation; it returns nil for any other model.
func openEncoderArg(args []string, rf runFlags) (*engine.Encoder, error) {
	if len(args) == 0 {
		return nil, nil
	}
	path, err := resolveModel(args[0])
	if err != nil {
		return nil, err
	}
	if !model.IsEncoderPath(path) {
		return nil, nil // not an encoder model: the decoder path reports any error
	}
	opts, err := rf.options()
	if err != nil {
		return nil, err
	}
	return engine.OpenEncoder(path, opts)
}

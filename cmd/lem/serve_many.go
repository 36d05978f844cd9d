package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lem-engine/lem/catalog"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/server"
)

// manyServe carries serve's other flags to serveMany.
type manyServe struct {
	rf          runFlags
	parallel    int
	draft       int
	kv          int64
	limits      server.Config
	cors, hosts []string
	addr        string
	maxQueue    int
	maxBody     int64
	drain       time.Duration
	logContent  bool
	policy      *server.Policy
	welfare     *server.WelfareConfig
	config      string // --config
}

// serveMany serves several models, each loaded on first use: the models
// args name (paths or names) and every model of the dirs.
func serveMany(cmd *cobra.Command, ln net.Listener, log *slog.Logger, args, dirs, roots []string, limit int64,
	keepAlive time.Duration, adminKey, apiKey string, o manyServe) error {
	opts := server.ModelOptions{Context: o.rf.ctx, Parallel: o.parallel, KVBytes: o.kv, Draft: o.draft}
	var specs []server.ModelSpec
	seen := map[string]bool{}
	add := func(name, path string) error {
		if seen[name] {
			return fmt.Errorf("two models named %q (%s)", name, path)
		}
		seen[name] = true
		specs = append(specs, server.ModelSpec{Name: name, Path: path, Options: opts})
		return nil
	}
	addSpec := func(sp server.ModelSpec) error {
		if seen[sp.Name] {
			return fmt.Errorf("two models named %q (%s)", sp.Name, sp.Path)
		}
		seen[sp.Name] = true
		specs = append(specs, sp)
		return nil
	}
	for _, a := range args {
		path, err := resolveModel(a)
		if err != nil {
			return err
		}
		name := a
		if path == a {
			name = filepath.Base(filepath.Clean(a))
		}
		if err := add(name, path); err != nil {
			return err
		}
	}
	allRoots := append([]string{catalog.ModelsDir()}, roots...)
	for _, d := range dirs {
		if d == "default" {
			d = catalog.ModelsDir()
		}
		entries, err := catalog.List(catalog.Dirs{Models: d})
		if err != nil {
			return fmt.Errorf("--models %s: %w", d, err)
		}
		for _, e := range entries {
			sp, err := server.SpecFromEntry(e, opts)
			if err != nil {
				return fmt.Errorf("--models %s: %w", d, err)
			}
			if err := addSpec(sp); err != nil {
				return fmt.Errorf("--models %s: %w", d, err)
			}
		}
		allRoots = append(allRoots, d)
	}
	var aliases map[string]string
	if o.config != "" {
		mc, err := server.LoadModelsConfig(o.config)
		if err != nil {
			return err
		}
		if specs, aliases, err = mc.Apply(specs, resolveModel); err != nil {
			return err
		}
	}
	if len(specs) == 0 {
		return fmt.Errorf("no models to serve in %v", dirs)
	}
	// /api/create and /api/copy write to the first --models directory,
	// else lem's models directory.
	modelsDir := catalog.ModelsDir()
	if len(dirs) > 0 && dirs[0] != "default" {
		modelsDir = dirs[0]
	}
	dev, _ := resolveDevice(o.rf.device, o.rf.ngl)
	if adminKey == "" {
		adminKey = os.Getenv("LEM_ADMIN_KEY")
	}
	if adminKey == "" {
		var err error
		if adminKey, err = newAdminKey(log); err != nil {
			return err
		}
	}
	cfg := o.limits
	for _, d := range []*time.Duration{&cfg.HeaderTimeout, &cfg.BodyTimeout, &cfg.IdleTimeout} {
		if *d == 0 {
			*d = -1
		}
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = -1
	}
	cfg.APIKey, cfg.CORSOrigins, cfg.MaxQueue, cfg.MaxBodyBytes = apiKey, o.cors, o.maxQueue, o.maxBody
	cfg.AllowedHosts = append(o.hosts, addrName(o.addr)...)
	cfg.LogContent, cfg.Logger = o.logContent, log
	cfg.Version = releaseVersion()
	cfg.Policy = o.policy
	cfg.Welfare = o.welfare
	rf := o.rf
	s, err := server.NewRegistry(cfg, server.RegistryConfig{
		Models: specs, Open: func(path string) (*engine.Model, error) { return rf.open(path) },
		OpenEncoder: func(path string) (*engine.Encoder, error) {
			opts, err := rf.options()
			if err != nil {
				return nil, err
			}
			return engine.OpenEncoder(path, opts)
		},
		GPU:         strings.HasPrefix(dev, "cuda"),
		ModelsDir:   modelsDir,
		Aliases:     aliases,
		MemoryLimit: limit, KeepAlive: keepAlive, Roots: allRoots, Options: opts, AdminKey: adminKey,
	})
	if err != nil {
		return err
	}
	names := make([]string, len(specs))
	for i, sp := range specs {
		names[i] = sp.Name
	}
	ctx := shutdownOnSignal(cmd.Context(), log, cmd.ErrOrStderr())
	log.Info("serving models loaded on first use", "models", names, "memory_limit", limit, "keep_alive", keepAlive,
		"url", "http://"+ln.Addr().String())
	return s.Serve(ctx, ln, o.drain)
}

// newAdminKey generates an admin key, writes it (mode 0600) to lem's
// data directory and logs it once.
func newAdminKey(log *slog.Logger) (string, error) {
	b := make([]byte, 24)
	rand.Read(b)
	key := "lem-admin-" + hex.EncodeToString(b)
	dir := catalog.DataDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("writing the admin key: %w", err)
	}
	path := filepath.Join(dir, "admin-key")
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing the admin key: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return "", fmt.Errorf("writing the admin key: %w", err)
	}
	log.Info("generated the admin key of /v1/admin/ (also in "+path+")", "admin_key", key)
	return key, nil
}

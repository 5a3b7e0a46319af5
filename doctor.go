package main

import (
	"cmp"
	"context"
	"flag"
	"log/slog"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/manage/doctor"
)

// doctorCommand is `sandbox-mcp doctor`: it checks this machine for the
// options given (isolation, provider, directories, versions) and exits 1
// when a check fails.
func doctorCommand(fs *flag.FlagSet, g *globals) func(context.Context, []string) error {
	o := &serveOptions{}
	o.registerSandboxFlags(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	return func(ctx context.Context, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		o.resolveProvider(ctx, cmp.Or(g.log, slog.Default()))
		rep := doctor.Run(ctx, doctor.Config{
			Provider:     o.provider,
			DockerHost:   o.dockerHost,
			E2BAPIKey:    o.e2b.apiKey(),
			E2BAPIURL:    o.e2b.resolvedAPIURL(),
			Isolation:    o.isolation,
			StateDir:     o.stateDir,
			ArtifactsDir: o.toolsConfig().ArtifactsDir,
			Version:      buildVersion(),
			EnvdVersion:  daemon.Version,
		})
		if *asJSON {
			if err := rep.WriteJSON(g.stdout); err != nil {
				return err
			}
		} else {
			rep.WriteText(g.stdout)
		}
		if !rep.OK() {
			return exitError{1}
		}
		return nil
	}
}

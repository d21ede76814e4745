package main

import (
	"cmp"
	"runtime"
	"runtime/debug"
	"strings"
)

// versionLine is what --version prints: the module's version (a release
// tag, a pseudo-version, or "(devel)" for a build from a checkout that
// recorded none), the VCS revision the build recorded (with its time, and
// "modified" for uncommitted changes) or "revision unknown" (go run, go
// build -buildvcs=false, a git worktree), and the Go release and platform.
func versionLine(info *debug.BuildInfo, ok bool) string {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	if !ok || info == nil {
		return "reprise (unknown), revision unknown, " + runtime.Version() + " " + platform
	}
	parts := []string{"reprise " + cmp.Or(info.Main.Version, "(devel)")}
	switch revision, at := setting(info, "vcs.revision"), setting(info, "vcs.time"); {
	case revision == "":
		parts = append(parts, "revision unknown")
	case at != "":
		parts = append(parts, "revision "+revision+" of "+at)
	default:
		parts = append(parts, "revision "+revision)
	}
	if setting(info, "vcs.modified") == "true" {
		parts = append(parts, "modified")
	}
	return strings.Join(append(parts, cmp.Or(info.GoVersion, runtime.Version())+" "+platform), ", ")
}

// shortVersion is the version for the log: the module's, and the first 12
// characters of the revision (+dirty when modified) unless the version
// names it already (a pseudo-version).
func shortVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v, revision := cmp.Or(info.Main.Version, "(devel)"), setting(info, "vcs.revision")
	revision = revision[:min(12, len(revision))]
	if revision == "" || strings.Contains(v, revision) {
		return v
	}
	if setting(info, "vcs.modified") == "true" {
		revision += "+dirty"
	}
	return v + " " + revision
}

// setting is the build setting key of info ("" when absent).
func setting(info *debug.BuildInfo, key string) string {
	for _, s := range info.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

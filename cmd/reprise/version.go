package main

import (
	"cmp"
	"runtime"
	"runtime/debug"
	"strings"
)

// version and revision are stamped into release builds with
// -ldflags "-X main.version=v1.2.0 -X main.revision=<commit>" (the
// Dockerfile's VERSION and REVISION build arguments, docs/release.md): an
// image is built without the VCS data Go records from a checkout, and a
// binary built from a tag's source outside its module has no version.
var version, revision string

// stamp is what -ldflags stamped: empty fields when nothing was.
type stamp struct{ version, revision string }

// stamped is this binary's stamp.
func stamped() stamp { return stamp{version, revision} }

// versionLine is what --version prints: the stamped version, else the
// module's (a release tag, a pseudo-version, or "(devel)" for a build from
// a checkout that recorded none), the stamped revision or the one the
// build recorded (with its time, and "modified" for uncommitted changes)
// or "revision unknown" (go run, go build -buildvcs=false, a git
// worktree), and the Go release and platform.
func versionLine(info *debug.BuildInfo, ok bool, st stamp) string {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	if !ok || info == nil {
		info = &debug.BuildInfo{Main: debug.Module{Version: "(unknown)"}}
	}
	parts := []string{"reprise " + cmp.Or(st.version, info.Main.Version, "(devel)")}
	recorded := setting(info, "vcs.revision")
	switch revision, at := cmp.Or(st.revision, recorded), setting(info, "vcs.time"); {
	case revision == "":
		parts = append(parts, "revision unknown")
	case at != "" && revision == recorded:
		parts = append(parts, "revision "+revision+" of "+at)
	default:
		parts = append(parts, "revision "+revision)
	}
	if setting(info, "vcs.modified") == "true" && (st.revision == "" || st.revision == recorded) {
		parts = append(parts, "modified")
	}
	return strings.Join(append(parts, cmp.Or(info.GoVersion, runtime.Version())+" "+platform), ", ")
}

// shortVersion is the version for the log: the module's, and the first 12
// characters of the revision (+dirty when modified) unless the version
// names it already (a pseudo-version).
func shortVersion() string {
	info, ok := debug.ReadBuildInfo()
	return shortVersionOf(info, ok, stamped())
}

// shortVersionOf is shortVersion of a build's info and stamp.
func shortVersionOf(info *debug.BuildInfo, ok bool, st stamp) string {
	if !ok || info == nil {
		info = &debug.BuildInfo{Main: debug.Module{Version: "(unknown)"}}
	}
	recorded := setting(info, "vcs.revision")
	v, revision := cmp.Or(st.version, info.Main.Version, "(devel)"), cmp.Or(st.revision, recorded)
	revision = revision[:min(12, len(revision))]
	if revision == "" || strings.Contains(v, revision) {
		return v
	}
	if setting(info, "vcs.modified") == "true" && (st.revision == "" || st.revision == recorded) {
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

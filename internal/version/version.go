package version

// Version is berth's release version; overridden at link time for releases
// with -ldflags "-X berth.dev/berth/internal/version.Version=...".
var Version = "0.1.0-dev.4"

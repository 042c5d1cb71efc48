package executor

import (
	"os"
	"path/filepath"
	"strings"
)

// DefaultPath is the PATH used to find a command when the task's
// environment has none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// LookPath finds command the way a shell would, but in the task's PATH
// (pathEnv), not the caller's. A command with a slash is a path, relative
// to dir unless absolute, returned as it is: whether it exists is for exec
// to find out. An isolated task's command is looked up by its init, inside
// the task's root.
func LookPath(command, dir, pathEnv string) (string, *StartError) {
	if strings.ContainsRune(command, '/') {
		if !filepath.IsAbs(command) {
			return filepath.Join(dir, command), nil
		}
		return command, nil
	}
	if pathEnv == "" {
		pathEnv = DefaultPath
	}
	// A shell that finds only files it may not execute says "permission
	// denied" for the first of them, and so does this.
	var denied string
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" || !filepath.IsAbs(d) {
			continue // relative PATH entries would depend on the working directory
		}
		p := filepath.Join(d, command)
		st, err := os.Stat(p)
		switch {
		case err != nil || st.IsDir():
		case st.Mode()&0o111 != 0:
			return p, nil
		case denied == "":
			denied = p
		}
	}
	if denied != "" {
		return "", &StartError{Kind: StartPermissionDenied, Path: denied, Detail: "not executable"}
	}
	return "", &StartError{Kind: StartNotFound, Path: command, Detail: "not found in PATH " + pathEnv}
}

// envValue returns the value of key in an environment list.
func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// LoadConfigFiles builds the configuration `berth run -config P1 -config P2`
// describes: DefaultConfig, then each path merged in order, later values
// overriding earlier ones (see Merge). A path that is a directory stands for
// every *.hcl and *.json file directly in it, in lexical order; files whose
// names start with "." (editor swap and lock files) are skipped. A file named
// explicitly is read as JSON when it ends in ".json" and as HCL otherwise.
//
// Problems in the files are reported together as ConfigErrors, across all
// files; a file that cannot be read stops the load with its *fs.PathError.
// The result is not validated: merge flags first, then call Validate.
//
// The result remembers which keys the files set, so it can be merged onto
// DevConfig for `berth run -dev -config ...` without the defaults it
// started from overriding dev mode's choices.
func LoadConfigFiles(paths []string) (*Config, error) {
	c := DefaultConfig()
	c.set = map[string]SourcePos{}
	var errs ConfigErrors
	for _, p := range paths {
		files, err := configFilesAt(p)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			fc, err := ParseConfig(f, src)
			var ces ConfigErrors
			switch {
			case errors.As(err, &ces):
				errs = append(errs, ces...)
			case err != nil:
				return nil, fmt.Errorf("%s: %w", f, err)
			default:
				c = c.Merge(fc)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}

// configFilesAt returns path itself, or the config files in it when it is a
// directory.
func configFilesAt(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path) // sorted by name
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		ext := strings.ToLower(filepath.Ext(name))
		if strings.HasPrefix(name, ".") || (ext != ".hcl" && ext != ".json") {
			continue
		}
		full := filepath.Join(path, name)
		// Follow symlinks, as config management tools like to install them.
		if fi, err := os.Stat(full); err != nil {
			return nil, err
		} else if fi.IsDir() {
			continue
		}
		files = append(files, full)
	}
	return files, nil
}

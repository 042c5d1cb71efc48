package ociarchive

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os/exec"
	"path"
	"strings"
)

// Executable is the files that run the ELF executable at src as dst in an
// image: the executable itself and, when it is dynamically linked, its
// program interpreter and every shared library ldd finds for it, each at
// the path this machine has it.
func Executable(src, dst string) ([]File, error) {
	files := []File{{Path: dst, Source: src}}
	f, err := elf.Open(src)
	if err != nil {
		return nil, fmt.Errorf("executable %s: %w", src, err)
	}
	dynamic := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			dynamic = true
		}
	}
	f.Close()
	if !dynamic {
		return files, nil
	}
	out, err := exec.Command("ldd", src).Output()
	if err != nil {
		return nil, fmt.Errorf("executable %s is dynamically linked; listing its libraries with ldd: %w", src, err)
	}
	libs, err := parseLdd(out)
	if err != nil {
		return nil, fmt.Errorf("executable %s: ldd: %w", src, err)
	}
	for _, lib := range libs {
		files = append(files, File{Path: lib, Source: lib})
	}
	return files, nil
}

// parseLdd reads the libraries ldd lists, in its order without repeats:
// "name => /path (0x…)" and the interpreter's "/path (0x…)". The kernel's
// vDSO ("linux-vdso.so.1 (0x…)") is no file; a library ldd could not find
// ("name => not found") is an error.
func parseLdd(out []byte) ([]string, error) {
	var libs []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line == "statically linked" {
			continue
		}
		file := line
		if name, target, ok := strings.Cut(line, "=>"); ok {
			file = strings.TrimSpace(target)
			if strings.HasPrefix(file, "not found") {
				return nil, fmt.Errorf("library %s not found", strings.TrimSpace(name))
			}
		}
		if i := strings.Index(file, " ("); i >= 0 {
			file = file[:i]
		}
		file = strings.TrimSpace(file)
		if !strings.HasPrefix(file, "/") {
			// The vDSO, or a line ldd prints that names no file.
			continue
		}
		if path.Clean(file) != file {
			return nil, fmt.Errorf("library path %q is not clean", file)
		}
		if !seen[file] {
			seen[file] = true
			libs = append(libs, file)
		}
	}
	return libs, sc.Err()
}

// Command taskprog is the program the containerd driver's tests pack into
// their test image (built statically, so the image needs no libc). Its
// first argument picks a behaviour:
//
//	exit N              exit with code N
//	run                 on SIGTERM print "got SIGTERM" and exit 0; until then block
//	ignore              ignore SIGTERM; block
//	sleep D N           sleep for duration D, then exit N
//	echo OUT ERR        write OUT to stdout and ERR to stderr, exit 0
//	env                 print the environment, sorted, one per line
//	id                  print "uid gid cwd" and the hostname
//	cat FILE            print FILE
//	write FILE TEXT     write TEXT to FILE (exit 1 on failure, saying why)
//	oom                 allocate memory until something stops it
//	mount DIR           mount a tmpfs at DIR holding a file "made-inside", then block
//	count N             print 1..N to stdout, one per line, exit 0
//
// run, ignore and mount create the file named by DRIVERTEST_READY_FILE,
// when set, once they are ready for signals.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: taskprog MODE ARGS...")
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "exit":
		os.Exit(atoi(arg(args, 0)))
	case "run":
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		ready()
		<-term
		fmt.Println("got SIGTERM")
		os.Exit(0)
	case "ignore":
		signal.Ignore(syscall.SIGTERM)
		ready()
		for { // select{} would be a deadlock to the runtime
			time.Sleep(time.Hour)
		}
	case "sleep":
		d, err := time.ParseDuration(arg(args, 0))
		if err != nil {
			fail(err.Error())
		}
		time.Sleep(d)
		os.Exit(atoi(arg(args, 1)))
	case "echo":
		fmt.Fprintln(os.Stdout, arg(args, 0))
		fmt.Fprintln(os.Stderr, arg(args, 1))
	case "env":
		env := os.Environ()
		slices.Sort(env)
		for _, kv := range env {
			fmt.Println(kv)
		}
	case "id":
		cwd, _ := os.Getwd()
		host, _ := os.Hostname()
		fmt.Printf("%d %d %s\n%s\n", os.Getuid(), os.Getgid(), cwd, host)
	case "cat":
		b, err := os.ReadFile(arg(args, 0))
		if err != nil {
			fail(err.Error())
		}
		os.Stdout.Write(b)
	case "write":
		if err := os.WriteFile(arg(args, 0), []byte(arg(args, 1)), 0o644); err != nil {
			fail(err.Error())
		}
	case "oom":
		for {
			b := make([]byte, 8<<20)
			for i := range b {
				b[i] = 1
			}
			hoard = append(hoard, b)
		}
	case "mount":
		dir := arg(args, 0)
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
			fail("mount tmpfs: " + err.Error())
		}
		if err := os.WriteFile(dir+"/made-inside", []byte("inside\n"), 0o644); err != nil {
			fail(err.Error())
		}
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		ready()
		<-term
		syscall.Unmount(dir, 0)
		os.Exit(0)
	case "count":
		for i := 1; i <= atoi(arg(args, 0)); i++ {
			fmt.Println(i)
		}
	default:
		fail("unknown mode " + os.Args[1])
	}
}

// hoard keeps what oom allocates reachable.
var hoard [][]byte

func ready() {
	if p := os.Getenv("DRIVERTEST_READY_FILE"); p != "" {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			fail("ready file: " + err.Error())
		}
	}
}

func arg(args []string, i int) string {
	if i >= len(args) {
		fail(fmt.Sprintf("missing argument %d", i+1))
	}
	return args[i]
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fail(err.Error())
	}
	return n
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "taskprog:", msg)
	os.Exit(100)
}

package sdk

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	plugin "github.com/hashicorp/go-plugin"
)

// brokenStderrEnv makes this test binary serve fakeDriver and log once its
// parent says the reader of its stderr is gone.
const brokenStderrEnv = "BERTH_SDK_TEST_BROKEN_STDERR"

// serveWithBrokenStderr is the child of TestPluginSurvivesDeadStderr. It
// serves, says "serving", waits for a line on stdin (sent once the parent
// closed the read end of its stderr), logs as a plugin does, and says
// "alive" if the log did not kill it.
func serveWithBrokenStderr() int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reattach := make(chan *plugin.ReattachConfig, 1)
	served := make(chan error, 1)
	go func() {
		served <- ServeDriverWith(newFakeDriver(), ServeOptions{
			Test: &plugin.ServeTestConfig{Context: ctx, ReattachConfigCh: reattach},
		})
	}()
	select {
	case <-reattach:
	case err := <-served:
		fmt.Println("serve ended:", err)
		return 1
	}
	fmt.Println("serving")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return 1
	}
	NewPluginLogger("fake").Error("the agent is gone")
	fmt.Println("alive")
	return 0
}

// After an agent crash a reattached plugin's stderr is a pipe nobody
// reads; its next log line must not kill it with SIGPIPE.
func TestPluginSurvivesDeadStderr(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), brokenStderrEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdoutR, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = errW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	errW.Close()
	done := make(chan struct{})
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-done
			cmd.Wait()
		}
	}()
	lines := make(chan string, 4)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdoutR)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(time.Minute):
			t.Fatal("child said nothing for a minute")
			return ""
		}
	}
	if l := next(); l != "serving" {
		t.Fatalf("child said %q, want serving", l)
	}
	errR.Close() // the agent died
	if _, err := stdin.Write([]byte("log\n")); err != nil {
		t.Fatal(err)
	}
	l := next()
	<-done
	err = cmd.Wait()
	if l != "alive" || err != nil {
		t.Fatalf("child said %q after logging and exited with %v, want alive and 0", l, err)
	}
}

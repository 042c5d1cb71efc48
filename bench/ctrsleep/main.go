// Command ctrsleep is the process of the containerd bench's image: built
// static and packed as its only layer's entrypoint, it waits for SIGTERM or
// SIGINT and exits 0, as `sleep` would be killed, without needing a libc in
// the image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
}

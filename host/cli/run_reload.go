package cli

import (
	"os"
)

// reloader is what SIGHUP reloads: the agent's TLS material
// (agent.Agent.ReloadTLS).
type reloader interface{ ReloadTLS() error }

// waitSignal waits for a shutdown signal, reloading on every SIGHUP
// meanwhile. The agent logs each reload's outcome and keeps what it had
// when one fails.
func waitSignal(a reloader, signals, hup <-chan os.Signal) os.Signal {
	for {
		select {
		case sig := <-signals:
			return sig
		case <-hup:
			_ = a.ReloadTLS()
		}
	}
}

package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
)

// BenchmarkJobListACL measures what ACL adds to a read through the HTTP
// API: the route's check (ACL.Authorize on a server) before the handler,
// and the server's check of the handler's RPC.
func BenchmarkJobListACL(b *testing.B) {
	for _, enabled := range []bool{false, true} {
		b.Run(fmt.Sprintf("acl=%v", enabled), func(b *testing.B) {
			cfg := DevConfig()
			cfg.Ports = Ports{}
			cfg.ACL.Enabled = enabled
			a, err := New(cfg, testutil.Logger(b))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(a.Shutdown)
			base := "http://" + a.HTTPAddr()
			var secret string
			testutil.WaitFor(b, 20*time.Second, func() error {
				resp, err := http.Post(base+"/v1/acl/bootstrap", "application/json", nil)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				var out struct {
					SecretID string `json:"secret_id"`
				}
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("bootstrap: %d %s", resp.StatusCode, body)
				}
				if err := json.NewDecoder(bytes.NewReader(body)).Decode(&out); err != nil {
					return err
				}
				secret = out.SecretID
				return nil
			})
			req, _ := http.NewRequest("GET", base+"/v1/jobs", nil)
			req.Header.Set("X-Berth-Token", secret)
			b.ResetTimer()
			for b.Loop() {
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}

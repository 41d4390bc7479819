package httpget

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

func serve(t *testing.T, body []byte) (*httptest.Server, *atomic.Int32) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/debian.iso":
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body)
		case "/short.iso": // the connection drops half-way
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body[:len(body)/2])
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// TestGet: a download lands whole and verified, reports progress, and is not fetched again;
// a wrong checksum, a short body or a 404 leave nothing at the destination (nor a .part).
func TestGet(t *testing.T) {
	body := bytes.Repeat([]byte("iso9660!"), 64<<10) // 512 KiB
	srv, hits := serve(t, body)
	dir := t.TempDir()
	dest := filepath.Join(dir, "debian.iso")
	var progress bytes.Buffer
	fetched, err := Get(context.Background(), srv.URL+"/debian.iso", sum(body), dest, Options{Progress: &progress})
	if err != nil || !fetched {
		t.Fatalf("fetched %v, %v", fetched, err)
	}
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, body) {
		t.Fatal("destination differs from the served file")
	}
	if !strings.Contains(progress.String(), "fetch debian.iso: 50% (") || !strings.Contains(progress.String(), "100% (512 KiB of 512 KiB)") {
		t.Errorf("progress:\n%s", progress.String())
	}
	if fetched, err := Get(context.Background(), srv.URL+"/debian.iso", sum(body), dest, Options{}); err != nil || fetched || hits.Load() != 1 {
		t.Errorf("second fetch: fetched %v, %v, %d requests (want no new one)", fetched, err, hits.Load())
	}

	for _, c := range []struct {
		path, checksum, want string
		is                   error
	}{
		{"/debian.iso", sum([]byte("other")), "checksum mismatch", host.ErrInvalid},
		{"/short.iso", sum(body), "run apply again", nil},
		{"/missing.iso", sum(body), "404 Not Found", host.ErrNotFound},
	} {
		d := filepath.Join(t.TempDir(), "x.iso")
		_, err := Get(context.Background(), srv.URL+c.path, c.checksum, d, Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) || c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("%s: %v, want %q", c.path, err, c.want)
		}
		left, _ := filepath.Glob(filepath.Join(filepath.Dir(d), "*"))
		hidden, _ := filepath.Glob(filepath.Join(filepath.Dir(d), ".*"))
		if len(left)+len(hidden) != 0 {
			t.Errorf("%s: left %v %v", c.path, left, hidden)
		}
	}
	// A file at the destination that the sidecar does not vouch for is fetched again.
	if err := os.WriteFile(dest, []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fetched, err := Get(context.Background(), srv.URL+"/debian.iso", sum(body), dest, Options{}); err != nil || !fetched {
		t.Errorf("changed file: fetched %v, %v (want a new download)", fetched, err)
	}
}

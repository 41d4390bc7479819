// Package httpget downloads a file (an installer ISO) into a directory, verifying its checksum
// while it streams, so a file at its final name is always a whole, verified one. It links
// net/http and crypto/tls: only vgpu-host-agent imports it (package fetch says why).
package httpget

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/fetch"
)

// Options tune Get.
type Options struct {
	// Progress receives a line every 10 % (and at the end); nil for none.
	Progress io.Writer
	// Client is the HTTP client (default: 30 s to connect and get headers, proxies from the
	// environment, no overall timeout: an ISO takes minutes).
	Client *http.Client
}

// Get downloads u into dest unless dest already holds the file with that checksum. It writes
// dest's directory's ".NAME.part" first, hashing as it goes, and renames it to dest only when
// the checksum matches: an interrupted or wrong download never sits at dest. Errors name the
// URL and what to do.
func Get(ctx context.Context, u, checksum, dest string, o Options) (fetched bool, err error) {
	if fetch.Have(dest, checksum) {
		return false, nil
	}
	newHash, want, err := fetch.ParseChecksum(checksum)
	if err != nil {
		return false, fmt.Errorf("%w: %w", err, host.ErrInvalid)
	}
	client := o.Client
	if client == nil {
		client = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, ResponseHeaderTimeout: 30 * time.Second, TLSHandshakeTimeout: 30 * time.Second}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, fmt.Errorf("fetch %s: %w", u, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, fmt.Errorf("fetch %s: %w (check the URL and the network, or download it yourself and give its path)", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("fetch %s: the server answered %s: %w", u, resp.Status, host.ErrNotFound)
	}
	part := filepath.Join(filepath.Dir(dest), "."+filepath.Base(dest)+".part")
	f, err := os.OpenFile(part, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return false, fmt.Errorf("fetch %s: %w", u, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(part)
		}
	}()
	h := newHash()
	w := io.MultiWriter(f, h)
	var body io.Reader = resp.Body
	if o.Progress != nil {
		body = &progress{r: resp.Body, total: resp.ContentLength, name: filepath.Base(dest), out: o.Progress, next: 10}
	}
	n, err := io.Copy(w, body)
	if err != nil {
		return false, fmt.Errorf("fetch %s: after %d bytes: %w (run apply again to start over)", u, n, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return false, fmt.Errorf("fetch %s: got %d of %d bytes (run apply again to start over)", u, n, resp.ContentLength)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return false, fmt.Errorf("fetch %s: checksum mismatch: got %s, want %s (a changed or damaged file; nothing was kept): %w", u, got, want, host.ErrInvalid)
	}
	if err = f.Sync(); err != nil {
		return false, fmt.Errorf("fetch %s: %w", u, err)
	}
	if err = f.Close(); err != nil {
		return false, fmt.Errorf("fetch %s: %w", u, err)
	}
	if err = os.Rename(part, dest); err != nil {
		return false, fmt.Errorf("fetch %s: %w", u, err)
	}
	if err := host.WriteFileAtomic(fetch.Sidecar(dest), []byte(checksum+" "+strconv.FormatInt(n, 10)+"\n"), 0o644); err != nil {
		return true, fmt.Errorf("fetch %s: record its checksum: %w", u, err)
	}
	return true, nil
}

// Fetch is Get in the shape of lifecycle.Options.Fetch: progress (nil: quiet) gets a line
// every 10 %.
func Fetch(ctx context.Context, u, checksum, dest string, progress io.Writer) error {
	_, err := Get(ctx, u, checksum, dest, Options{Progress: progress})
	return err
}

// progress reports a download every 10 %.
type progress struct {
	r          io.Reader
	total, got int64
	name       string
	out        io.Writer
	next       int64
}

func (p *progress) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.got += int64(n)
	if p.total > 0 {
		for pct := p.got * 100 / p.total; pct >= p.next && p.next <= 100; p.next += 10 {
			fmt.Fprintf(p.out, "fetch %s: %d%% (%s of %s)\n", p.name, p.next, human(p.got), human(p.total))
		}
	} else if errors.Is(err, io.EOF) {
		fmt.Fprintf(p.out, "fetch %s: %s\n", p.name, human(p.got))
	}
	return n, err
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

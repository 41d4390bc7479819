// Package fetch is what vgpu-host knows about a downloaded file (an installer ISO): the URL
// and checksum a spec may name, and the sidecar that records a verified download so a later
// apply downloads nothing. The download itself is package httpget (net/http, crypto/tls),
// linked only into vgpu-host-agent: vgpu-host runs `vgpu-host-agent --fetch-iso` for it, so
// that its other commands do not pay net/http's initialisation at every start.
package fetch

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
)

// ParseChecksum checks a "sha256:HEX" or "sha512:HEX" checksum and returns its hash.
func ParseChecksum(sum string) (func() hash.Hash, string, error) {
	algo, want, ok := strings.Cut(sum, ":")
	size := 0
	var h func() hash.Hash
	switch algo {
	case "sha256":
		h, size = sha256.New, sha256.Size
	case "sha512":
		h, size = sha512.New, sha512.Size
	default:
		return nil, "", fmt.Errorf("checksum %q: want sha256:HEX or sha512:HEX (the line from the distribution's SHA256SUMS)", host.Clip(sum, 80))
	}
	want = strings.ToLower(want)
	if b, err := hex.DecodeString(want); !ok || err != nil || len(b) != size {
		return nil, "", fmt.Errorf("checksum %q: want %s: and %d hex digits", host.Clip(sum, 80), algo, 2*size)
	}
	return h, want, nil
}

// CheckURL checks that u is an http or https URL naming a file, and returns that file's name.
func CheckURL(u string) (string, error) {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return "", fmt.Errorf("url %q: want an http:// or https:// URL", host.Clip(u, 80))
	}
	name := path.Base(p.Path)
	if err := host.CheckComponent("file name", name); err != nil || name == "/" || name == "." {
		return "", fmt.Errorf("url %q: its path names no file to save", host.Clip(u, 80))
	}
	return name, nil
}

// Sidecar is the file next to a fetched file that records its checksum and size: a later fetch
// of the same checksum finds the file there and does nothing.
func Sidecar(dest string) string {
	return filepath.Join(filepath.Dir(dest), "."+filepath.Base(dest)+".checksum")
}

// Have reports whether dest holds the file with checksum already (as a fetch left it).
func Have(dest, checksum string) bool {
	b, err := host.ReadFileLimit(Sidecar(dest), 4096)
	if err != nil {
		return false
	}
	sum, size, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	st, err := os.Stat(dest)
	return ok && err == nil && sum == checksum && size == strconv.FormatInt(st.Size(), 10)
}

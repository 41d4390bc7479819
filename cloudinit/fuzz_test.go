package cloudinit

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf16"
)

// readJoliet reads the files of the root directory of an ISO 9660 image's Joliet tree: an
// independent reader (ECMA-119 §8.5, §9.1; Joliet: UCS-2 big-endian names) for the round trip.
func readJoliet(img []byte) (label string, files map[string][]byte, err error) {
	const sec = 2048
	at := func(lba, n uint32) ([]byte, error) {
		start := uint64(lba) * sec
		if start+uint64(n) > uint64(len(img)) {
			return nil, fmt.Errorf("extent %d+%d past the image end (%d)", lba, n, len(img))
		}
		return img[start : start+uint64(n)], nil
	}
	pvd, err := at(16, sec)
	if err != nil {
		return "", nil, err
	}
	if pvd[0] != 1 || string(pvd[1:6]) != "CD001" {
		return "", nil, fmt.Errorf("no primary volume descriptor")
	}
	label = string(bytes.TrimRight(pvd[40:72], " "))
	svd, err := at(17, sec)
	if err != nil {
		return "", nil, err
	}
	if svd[0] != 2 || string(svd[1:6]) != "CD001" || !bytes.Equal(svd[88:91], []byte{0x25, 0x2f, 0x45}) {
		return "", nil, fmt.Errorf("no Joliet supplementary descriptor")
	}
	root := svd[156:]
	dir, err := at(binary.LittleEndian.Uint32(root[2:]), binary.LittleEndian.Uint32(root[10:]))
	if err != nil {
		return "", nil, err
	}
	files = map[string][]byte{}
	for off := 0; off < len(dir) && dir[off] != 0; off += int(dir[off]) {
		r := dir[off:]
		if int(r[0]) > len(r) || 33+int(r[32]) > int(r[0]) {
			return "", nil, fmt.Errorf("bad directory record at %d", off)
		}
		id := r[33 : 33+int(r[32])]
		if r[25]&2 != 0 {
			continue // . and ..
		}
		u := make([]uint16, len(id)/2)
		for i := range u {
			u[i] = binary.BigEndian.Uint16(id[2*i:])
		}
		size := binary.LittleEndian.Uint32(r[10:])
		data := []byte{}
		if size > 0 {
			if data, err = at(binary.LittleEndian.Uint32(r[2:]), size); err != nil {
				return "", nil, err
			}
		}
		files[string(utf16.Decode(u))] = data
	}
	return label, files, nil
}

// FuzzSeedISO: the cloud-init seed written as an ISO 9660 + Joliet image. Invariant: no panic;
// what is written reads back: every file with its exact name and content, and the label. Seeds:
// the user-data of every example spec.
func FuzzSeedISO(f *testing.F) {
	examples, _ := filepath.Glob(filepath.Join("..", "examples", "*.yaml"))
	for _, p := range examples {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b), "instance-id: x\nlocal-hostname: x\n", "", "extra")
	}
	f.Add("#cloud-config\n", "", "version: 2\n", "user-data")
	f.Add("", "", "", "x\u00e9\U0001F600")
	f.Add(string(make([]byte, 5000)), "m", "n", "a;b")
	f.Fuzz(func(t *testing.T, user, meta, network, extra string) {
		s := Seed{UserData: user, MetaData: meta, NetworkConfig: network}
		want := s.Files()
		img, err := s.ISO()
		if err != nil {
			t.Fatalf("seed: %v", err)
		}
		check := func(img []byte, want map[string][]byte) {
			t.Helper()
			label, got, err := readJoliet(img)
			if err != nil {
				t.Fatalf("read back: %v", err)
			}
			if label != "CIDATA" && label != Label {
				t.Fatalf("label %q", label)
			}
			if len(got) != len(want) {
				t.Fatalf("%d files read back, want %d", len(got), len(want))
			}
			for n, b := range want {
				if !bytes.Equal(got[n], b) {
					t.Fatalf("file %q: %d bytes read back, want %d", n, len(got[n]), len(b))
				}
			}
		}
		check(img, want)
		// Arbitrary file names: refused, or written so they read back.
		want[extra] = []byte(user)
		img, err = WriteISO(Label, want)
		if err != nil {
			return
		}
		check(img, want)
	})
}

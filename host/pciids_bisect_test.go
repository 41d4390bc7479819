package host

import (
	"bytes"
	"math/rand/v2"
	"os"
	"testing"
)

// TestVendorLineBisection: bisection finds every vendor of a pci.ids file exactly where a
// search from the start does, and -1 for IDs that are not there.
func TestVendorLineBisection(t *testing.T) {
	t.Parallel()
	small := []byte("# comment\n0001  SafeNet\n\t0001  eToken\n1002  AMD\n\t5046  Rage 4\n\t\t1002 0001  sub\n# 1af4 is next\n" +
		"1af4  Red Hat, Inc.\n\t1050  Virtio GPU\n8086  Intel\nffff  Illegal\nC 00  Unclassified\n\t00  Non-VGA\n")
	files := withMachinePCIIDs(t, small)
	for name, data := range files {
		n := 0
		for i := 0; ; {
			j := nextVendorLine(data, i, len(data))
			if j < 0 {
				break
			}
			if id := string(data[j+1 : j+5]); vendorLine(data, id) != j {
				t.Errorf("%s: vendor %s at %d, the walk finds it at %d", name, id, vendorLine(data, id), j)
			}
			n++
			i = j + 1
		}
		if n < 4 {
			t.Errorf("%s: only %d vendors", name, n)
		}
		for _, id := range []string{"0000", "1003", "1af5", "fffe", "zzzz"} {
			want := bytes.Index(data, []byte("\n"+id+"  "))
			if got := vendorLine(data, id); got != want {
				t.Errorf("%s: vendor %s at %d, search finds it at %d", name, id, got, want)
			}
		}
	}
}

// TestDeviceLineBisection: in every vendor's section of a pci.ids file, bisection finds each
// device where a search from the start does, and -1 for IDs that are not there.
func TestDeviceLineBisection(t *testing.T) {
	t.Parallel()
	small := []byte("1002  AMD\n\t0001  first\n\t\t1002 0001  sub\n# comment\n\t5046  Rage 4\n\t\t1002 0001  sub\n\t\t1002 0002  sub2\n\t7000  last\n" +
		"10de  NVIDIA\n\t0002  n\n\t8000  m\nC 00  Unclassified\n\t00  Non-VGA\n")
	files := withMachinePCIIDs(t, small)
	devices := 0
	for name, data := range files {
		for i := 0; ; {
			vs := nextVendorLine(data, i, len(data))
			if vs < 0 {
				break
			}
			section := sectionOf(data, vs, 0)
			for j := 1; ; { // from the end of the vendor's line
				ds := nextDeviceLine(section, j, len(section))
				if ds < 0 {
					break
				}
				id := string(section[ds+2 : ds+6])
				want, wantName := findLine(section, 0, []byte("\n\t"+id+"  "))
				if got := deviceLine(section, id); got != want || lineName(section, got, len("\n\t0000  ")) != wantName {
					t.Errorf("%s: vendor %s device %s at %d, the search finds it at %d (%q)", name, section[1:5], id, got, want, wantName)
				}
				devices++
				j = ds + 1
			}
			for _, id := range []string{"0000", "7fff", "8000", "ffff", "zzzz"} {
				want, _ := findLine(section, 0, []byte("\n\t"+id+"  "))
				if got := deviceLine(section, id); got != want {
					t.Errorf("%s: vendor %s device %s at %d, search finds it at %d", name, section[1:5], id, got, want)
				}
			}
			i = vs + 1
		}
	}
	if devices < 8 {
		t.Errorf("only %d devices checked", devices)
	}
}

// withMachinePCIIDs returns the sample small and this machine's pci.ids, by name.
func withMachinePCIIDs(t *testing.T, small []byte) map[string][]byte {
	files := map[string][]byte{"small": small}
	for _, p := range pciIDsPaths {
		if b, err := os.ReadFile("/" + p); err == nil {
			files[p] = b
			return files
		}
	}
	t.Log("no pci.ids on this machine: only the small sample")
	return files
}

// TestConcurrentLookupsGiveTheSameNames: names looked up from several goroutines at once on one
// resolver (the agent's scans share one per root), several of them asking for the same vendors'
// sections while those are being found, are the names one goroutine alone gets. Run with -race,
// it also checks that a lookup waits for a section another goroutine is finding.
func TestConcurrentLookupsGiveTheSameNames(t *testing.T) {
	t.Parallel()
	const path = "/usr/share/misc/pci.ids"
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no %s", path)
	}
	ids := [][2]string{{"8086", "1593"}, {"8086", "7a00"}, {"10de", "2206"}, {"10de", "1aef"}, {"1af4", "1050"}, {"1b36", "000d"}, {"1234", "1111"}, {"1003", "0001"}}
	plain := NewPCIIDsFile(path)
	want := map[[2]string][2]string{}
	for _, id := range ids {
		want[id] = [2]string{plain.Vendor(id[0]), plain.Device(id[0], id[1])}
	}
	if want[ids[0]][0] == "" || want[ids[2]][1] == "" {
		t.Fatalf("the machine's pci.ids lacks Intel or NVIDIA names: %v", want)
	}
	for round := 0; round < 20; round++ {
		p := NewPCIIDsFile(path)
		errs := make(chan string, 2*len(ids))
		for _, id := range append(ids, ids...) {
			go func() {
				got := [2]string{p.Vendor(id[0]), p.Device(id[0], id[1])}
				if got != want[id] {
					errs <- id[0] + ":" + id[1] + ": " + got[0] + " / " + got[1] + ", want " + want[id][0] + " / " + want[id][1]
					return
				}
				errs <- ""
			}()
		}
		for range 2 * len(ids) {
			if e := <-errs; e != "" {
				t.Fatal(e)
			}
		}
	}
}

// TestTopLineMemo: topLine with one memo shared by many searches, from random places in both
// directions (as the bisections of several vendors and the ends of their sections ask), answers
// what a walk without memo answers, and the vendors' sections it gives are sectionOf's.
func TestTopLineMemo(t *testing.T) {
	t.Parallel()
	small := []byte("# comment\n0001  SafeNet\n\t0001  eToken\n\n1002  AMD\n\t5046  Rage 4\n\t\t1002 0001  sub\n# 1af4 is next\n" +
		"1af4  Red Hat, Inc.\n\t1050  Virtio GPU\n8086  Intel\nffff  Illegal\nC 00  Unclassified\n\t00  Non-VGA\n")
	for name, data := range withMachinePCIIDs(t, small) {
		var m gapMemo
		rng := rand.New(rand.NewPCG(1, uint64(len(data))))
		for k := 0; k < 3000; k++ {
			from := rng.IntN(len(data))
			to := from + rng.IntN(len(data)-from+1)
			if got, want := topLine(data, from, to, &m), topLine(data, from, to, nil); got != want {
				t.Fatalf("%s: topLine(%d, %d) with the memo of %d searches = %d, without = %d", name, from, to, k, got, want)
			}
		}
		for i := 0; ; {
			vs := nextVendorLineIn(data, i, len(data), &m)
			if vs != nextVendorLine(data, i, len(data)) {
				t.Fatalf("%s: next vendor line from %d differs with the memo", name, i)
			}
			if vs < 0 {
				break
			}
			id := string(data[vs+1 : vs+5])
			if got := vendorLineIn(data, id, &m); got != vs {
				t.Fatalf("%s: vendor %s at %d with the memo, %d without", name, id, got, vs)
			}
			end := len(data)
			if e := topLine(data, vs+1, len(data), &m); e >= 0 {
				end = e
			}
			if want := sectionOf(data, vs, 0); !bytes.Equal(data[vs:end], want) {
				t.Fatalf("%s: vendor %s's section is %d bytes with the memo, sectionOf's %d", name, id, end-vs, len(want))
			}
			i = vs + 1
		}
		for k := 1; k < len(m.gaps); k++ {
			if m.gaps[k-1][1] >= m.gaps[k][0] {
				t.Fatalf("%s: stretches %v and %v overlap or touch: not merged", name, m.gaps[k-1], m.gaps[k])
			}
		}
	}
}

package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/internal/testenv"
)

// envHelper makes the test binary, run as another user by helperAs, play the part its value
// names in TestHelperProcess instead of running tests.
const envHelper = "VGPU_HOST_AGENT_TEST_HELPER"

// helperAs returns the command that runs the test binary as cred, playing part (see
// TestHelperProcess) with env. The binary is copied into dir, where the other user can run it.
func helperAs(t *testing.T, dir string, cred *syscall.Credential, part string, env ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "helper.test")
	if _, err := os.Stat(bin); err != nil {
		b, err := os.ReadFile(exe)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-test.run=^TestHelperProcess$")
	cmd.Dir = dir
	cmd.Env = append([]string{envHelper + "=" + part}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd
}

// TestHelperProcess is not a test: it is the other user's process of the tests below,
// started by helperAs.
func TestHelperProcess(t *testing.T) {
	switch os.Getenv(envHelper) {
	case "":
		t.Skip("a helper process, run by other tests")
	case "trickle":
		os.Exit(trickleMain())
	case "health": // for each line read, GET /v1/health within 2 s, and say how it went
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			start := time.Now()
			err := Client{Socket: os.Getenv("SOCK")}.Do(ctx, "GET", "/v1/health", nil, nil)
			cancel()
			if err != nil {
				fmt.Printf("%v after %v\n", err, time.Since(start).Round(time.Millisecond))
			} else {
				fmt.Println("ok")
			}
		}
		os.Exit(0)
	}
	os.Exit(3)
}

// trickleMain is the attack of TestTrickledBodies: on a line on stdin, it opens $N connections to $SOCK, sends on
// each the headers of a 1 MB body and then one byte of it every 200 ms, says "ready" once all
// are open, and after $FOR prints how many the agent still holds open.
func trickleMain() int {
	n, _ := strconv.Atoi(os.Getenv("N"))
	d, _ := time.ParseDuration(os.Getenv("FOR"))
	bufio.NewReader(os.Stdin).ReadString('\n') // go
	var open atomic.Int32
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("unix", os.Getenv("SOCK"), time.Second)
		if err != nil {
			continue // the backlog is full: this connection never got in
		}
		open.Add(1)
		closed := make(chan struct{})
		go func() { // the agent answers (503, 408…) or closes: either way, it let go
			io.Copy(io.Discard, c)
			close(closed)
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			fmt.Fprintf(c, "POST /v1/exec HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n")
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for time.Now().Before(end) {
				select {
				case <-closed:
					open.Add(-1)
					return
				case <-tick.C:
					c.Write([]byte(" "))
				}
			}
		}()
	}
	fmt.Println("ready")
	wg.Wait()
	fmt.Println(open.Load())
	return 0
}

// TestTrickledBodies: a non-root user (nobody, a real process whose uid the agent takes from
// SO_PEERCRED) opens more connections than the agent has descriptors and trickles a body on
// each; root's GET /v1/health still answers within 2 s, again and again, and the connections
// the agent admitted are closed once their body is overdue.
//
// Before connections were capped per uid and bodies bounded, the agent spent its descriptors
// on the attacker's connections (accept: too many open files) and root's request never got
// in; the attacker's connections stayed open as long as it trickled.
func TestTrickledBodies(t *testing.T) {
	testenv.RequireRoot(t)
	const fds, conns = 200, 400 // the agent's descriptors (soft limit), the attack's connections
	s, _ := serve(t, &scriptRunner{}, func(s *Server) { s.SocketMode, s.BodyTimeout = 0o666, time.Second })
	dir := filepath.Dir(filepath.Dir(s.Socket))
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(s.Socket), 0o755)

	// Root's client is a process of its own, started first, with descriptors of its own:
	// the agent's are the ones under attack.
	_, probe, answers := helperPipes(t, helperAs(t, dir, &syscall.Credential{}, "health", "SOCK="+s.Socket))
	_, attack, lines := helperPipes(t, helperAs(t, dir, &syscall.Credential{Uid: 65534, Gid: 65534}, "trickle",
		"SOCK="+s.Socket, "N="+strconv.Itoa(conns), "FOR=4s"))

	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = fds
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })

	io.WriteString(attack, "go\n")
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("the attacker did not start: %q", lines.Text())
	}
	for i := 0; i < 4; i++ {
		io.WriteString(probe, "health\n")
		if !answers.Scan() || answers.Text() != "ok" {
			t.Fatalf("root's GET /v1/health under the attack (try %d): %s", i+1, answers.Text())
		}
		time.Sleep(300 * time.Millisecond)
	}
	if !lines.Scan() {
		t.Fatal("the attacker said nothing at its end")
	}
	var held int
	if err := json.Unmarshal(lines.Bytes(), &held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Errorf("%d of the attacker's connections still open after 4 s with a body timeout of 1 s", held)
	}
}

// helperPipes starts cmd with pipes to its stdin and from its stdout, and kills it when the
// test ends.
func helperPipes(t *testing.T, cmd *exec.Cmd) (*exec.Cmd, io.Writer, *bufio.Scanner) {
	t.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, in, bufio.NewScanner(out)
}

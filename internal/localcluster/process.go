package localcluster

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// agent is one running agent process with its log file.
type agent struct {
	name string
	bin  string
	args []string
	// env is added to the agent's inherited environment.
	env     []string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
}

func (a *agent) start() error {
	logFile, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening %s log: %w", a.name, err)
	}
	cmd := exec.Command(a.bin, a.args...)
	cmd.Env = append(os.Environ(), a.env...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// A process group of its own, so that a Ctrl-C in the terminal of
	// `make demo` reaches the demo, which then stops the agents in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", a.name, err)
	}
	a.cmd = cmd
	a.done = make(chan struct{})
	a.exitErr = nil
	go func() {
		a.exitErr = cmd.Wait()
		logFile.Close()
		close(a.done)
	}()
	return nil
}

// exited reports whether the process has ended.
func (a *agent) exited() bool {
	if a.done == nil {
		return true
	}
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// stop ends the agent process itself (not its children): SIGINT, then
// SIGKILL after the grace period.
func (a *agent) stop(grace time.Duration) {
	if a.exited() {
		return
	}
	_ = a.cmd.Process.Signal(os.Interrupt)
	select {
	case <-a.done:
	case <-time.After(grace):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
}

// logTail returns the last n lines of the agent's log.
func (a *agent) logTail(n int) string {
	data, err := os.ReadFile(a.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// portBusy reports whether the agent's log says a port was taken.
func (a *agent) portBusy() bool {
	data, _ := os.ReadFile(a.logPath)
	return bytes.Contains(data, []byte("address already in use"))
}

// failure wraps err with the agent's last log lines.
func (a *agent) failure(err error) error {
	return fmt.Errorf("%s agent: %w\n--- last lines of %s ---\n%s", a.name, err, a.logPath, a.logTail(40))
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago. Another process may still take one before the agent binds it; the
// caller retries on "address already in use".
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		listeners = append(listeners, l)
		port := l.Addr().(*net.TCPAddr).Port
		// Serf also binds UDP on the same port.
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		u.Close()
		ports = append(ports, port)
	}
	return ports, nil
}

// descendants returns the PIDs of every live process below pid, read from
// /proc.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, ok := parentPID(p)
		if ok {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

func parentPID(pid int) (int, bool) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && line == "" {
		return 0, false
	}
	// The command name may hold spaces and parentheses: fields start
	// after the last ')'.
	end := strings.LastIndexByte(line, ')')
	if end < 0 {
		return 0, false
	}
	fields := strings.Fields(line[end+1:])
	if len(fields) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(fields[1])
	return ppid, err == nil
}

// killTree kills the given processes and waits until they are gone.
func killTree(pids []int, deadline time.Duration) error {
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	end := time.Now().Add(deadline)
	for {
		alive := alivePIDs(pids)
		if len(alive) == 0 {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("processes still alive after SIGKILL: %v", alive)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func alivePIDs(pids []int) []int {
	var alive []int
	for _, p := range pids {
		err := syscall.Kill(p, 0)
		if err == nil || !errors.Is(err, syscall.ESRCH) {
			// A zombie still answers signal 0; it is gone once
			// its stat says so.
			if state, ok := procState(p); ok && state != "Z" {
				alive = append(alive, p)
			}
		}
	}
	return alive
}

func procState(pid int) (string, bool) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", false
	}
	line := string(data)
	end := strings.LastIndexByte(line, ')')
	if end < 0 {
		return "", false
	}
	fields := strings.Fields(line[end+1:])
	if len(fields) < 1 {
		return "", false
	}
	return fields[0], true
}

// StopProcess ends a started process that nothing else waits for:
// SIGINT, then SIGKILL after the grace period. It returns once the
// process has exited.
func StopProcess(cmd *exec.Cmd, grace time.Duration) {
	_ = cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

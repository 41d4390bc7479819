/* global cockpit */
// The page's one way to the host: the vgpu-host agent's API over its unix socket
// (docs/agent.md), through Cockpit's bridge. superuser "try": with administrative access the
// bridge connects as root; without it, as the logged-in user, whom the agent lets change the
// host only as a member of the socket's group (docs/security.md). The page decides nothing
// about permissions: the agent does, and its refusals are shown as it words them.

export const DEFAULT_SOCKET = "/run/vgpu-host/agent.sock";

let socket = DEFAULT_SOCKET;

// socketPath is the agent's socket the page talks to (after the first request).
export function socketPath() {
    return socket;
}

// loadSocket reads the agent's socket from this package's manifest, config.socket, as the
// bridge serves it (../manifests.json: with /etc/cockpit/vgpu-host.override.json applied, as
// for any Cockpit package); the agent's default when it names none.
async function loadSocket() {
    try {
        const r = await fetch("../manifests.json", { credentials: "same-origin" });
        const m = await r.json();
        const s = m && m["vgpu-host"] && m["vgpu-host"].config && m["vgpu-host"].config.socket;
        if (typeof s === "string" && s.startsWith("/"))
            socket = s;
    } catch (e) {
        console.warn("vgpu-host: manifests.json unreadable, using the default socket:", e);
    }
    return socket;
}

// AgentError is a failed request: unreachable (the agent is not running, or the socket keeps
// the user out), or an answer with an error status; message is the agent's own words.
export class AgentError extends Error {
    constructor(message, { status = 0, exitCode = null, unreachable = false, problem = "" } = {}) {
        super(message);
        this.status = status;
        this.exitCode = exitCode;
        this.unreachable = unreachable;
        this.problem = problem;
    }
}

let client = null;
// http opens the client once the socket's path is known.
function http() {
    if (!client) {
        client = loadSocket().then(path => cockpit.http({ unix: path, superuser: "try" }));
    }
    return client;
}

// request sends one request and resolves to the parsed JSON answer; it rejects with an
// AgentError carrying the agent's error text.
export function request(method, path, body) {
    // A body, "" for none: cockpit.http ends the request (and the agent answers) only after
    // the body is sent.
    const opts = { method, path, headers: { "Content-Type": "application/json" }, body: "" };
    if (body !== undefined)
        opts.body = typeof body === "string" ? body : JSON.stringify(body);
    return new Promise((resolve, reject) => {
        // Cockpit's own promise: its failure callback gets the answer's body too.
        http().then(h => h.request(opts).then(data => {
            try {
                resolve(data === "" ? null : JSON.parse(data));
            } catch (e) {
                reject(new AgentError(`the agent answered ${method} ${path} with something that is not JSON: ${e.message}`));
            }
        }, (ex, data) => {
            if (!ex || !ex.status) {
                // No HTTP answer at all: the socket is missing, refuses us, or nobody listens.
                const why = (ex && (ex.message || ex.problem)) || "no answer";
                reject(new AgentError(why, { unreachable: true, problem: (ex && ex.problem) || "" }));
                return;
            }
            let msg = ex.message || ex.reason || `HTTP ${ex.status}`;
            let exitCode = null;
            try {
                const j = JSON.parse(data);
                if (j && j.error)
                    msg = j.error;
                if (j && typeof j.exit_code === "number")
                    exitCode = j.exit_code;
            } catch (_) { /* not JSON: keep the HTTP reason */ }
            reject(new AgentError(msg, { status: ex.status, exitCode }));
        }));
    });
}

// exec runs one command of vgpu-host's tree as a typed request (POST /v1/exec): the command's
// name, its flags by long name with typed values, operands, and the content of files it reads.
// It resolves to {stdout, stderr, exit_code, json}: json is stdout parsed when the command was
// asked for --output json and printed it.
export async function exec(command, flags = {}, operands = [], files = {}) {
    const res = await request("POST", "/v1/exec", { command, flags, operands, files });
    let json = null;
    if (flags.output === "json" && res.stdout) {
        try {
            json = JSON.parse(res.stdout);
        } catch (_) { /* left null: stdout is shown as is */ }
    }
    return { ...res, json };
}

// CommandError is a command that ran and exited non-zero: its stderr, as the CLI prints it.
export class CommandError extends Error {
    constructor(res) {
        super((res.stderr || res.stdout || `exit code ${res.exit_code}`).trim());
        this.exitCode = res.exit_code;
        this.stdout = res.stdout;
    }
}

// run is exec that rejects with a CommandError when the command failed.
export async function run(command, flags = {}, operands = [], files = {}) {
    const res = await exec(command, flags, operands, files);
    if (res.exit_code !== 0)
        throw new CommandError(res);
    return res;
}

// EXIT_MEANING names the documented exit codes (README, "Exit codes").
export const EXIT_MEANING = {
    1: "failed",
    2: "usage or bad input",
    3: "not ready",
    4: "refused by a safety check",
    5: "busy",
    6: "not found",
    7: "unsupported",
};

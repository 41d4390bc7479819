// The page "GPUs" in a real browser against a real cockpit-ws and agent (run by test/run.sh,
// which sets the environment): every step waits for the elements that prove it, takes a
// screenshot, and the test fails (exit 1) naming the first step whose element did not appear.
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import puppeteer from "puppeteer-core";

const env = name => {
    const v = process.env[name];
    if (!v) {
        console.error(`browser.test: ${name} is not set (test/run.sh sets it)`);
        process.exit(2);
    }
    return v;
};
const URL = env("COCKPIT_URL");
const USER = env("COCKPIT_USER");
const PASSWORD = env("COCKPIT_PASSWORD");
const SHOTS = env("SCREENSHOTS");
const VM_DISK = env("VM_DISK");
const AGENT_PID = parseInt(env("AGENT_PID"), 10);
const TIMEOUT = 30000;

const GPU = "0000:01:00.0"; // the snapshot's GPU with its HDMI audio (0000:01:00.1) in group 10
const BOOT_VGA = "0000:00:02.0";

let n = 0;
let page;
let agent2 = null; // the second agent (the H200 capture), stopped when the test ends
const t0 = Date.now();

async function shot(name) {
    n++;
    const f = path.join(SHOTS, `${String(n).padStart(2, "0")}-${name}.png`);
    await page.screenshot({ path: f, fullPage: true });
    return f;
}

// step runs one step: its name is what the failure message says.
async function step(name, fn) {
    const s = Date.now();
    try {
        await fn();
        const f = await shot(name);
        console.log(`ok   ${name} (${Date.now() - s} ms) ${path.basename(f)}`);
    } catch (e) {
        try { await shot(`FAILED-${name}`) } catch (_) { /* the browser may be gone */ }
        console.error(`FAIL ${name}: ${e.message}`);
        throw e;
    }
}

// until waits in frame for pred(arg) to be true in the page; what names the element.
function until(frame, what, pred, arg) {
    return frame.waitForFunction(pred, { timeout: TIMEOUT, polling: 100 }, arg).catch(e => {
        throw new Error(`${what}: not seen within ${TIMEOUT / 1000} s (${e.message.split("\n")[0]})`);
    });
}

const text = (sel) => document.querySelector(sel)?.textContent || "";

async function main() {
    const browser = await puppeteer.launch({
        executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
        headless: true,
        args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        defaultViewport: { width: 1400, height: 1000 },
    });
    let frame;
    try {
        page = await browser.newPage();
        page.on("pageerror", e => console.error(`page error: ${e.message}`));

        await step("login", async () => {
            await page.goto(URL, { waitUntil: "load" });
            await page.waitForSelector("#login-user-input", { visible: true, timeout: TIMEOUT });
            await page.type("#login-user-input", USER);
            await page.type("#login-password-input", PASSWORD);
            await Promise.all([
                page.waitForNavigation({ timeout: TIMEOUT }).catch(() => {}),
                page.click("#login-button"),
            ]);
            await page.waitForSelector("#topnav, #main, nav", { timeout: TIMEOUT }).catch(() => {
                throw new Error("the shell after login: not seen (wrong password, PAM refused?)");
            });
        });

        await step("open-page", async () => {
            // The shell's menu entry from the manifest ("GPUs"), then the page's frame.
            const link = await page.waitForSelector("a[href='/vgpu-host']", { timeout: TIMEOUT }).catch(() => {
                throw new Error("the shell's menu entry GPUs (a[href='/vgpu-host']): not seen: is the package installed?");
            });
            await link.click();
            const el = await page.waitForSelector("iframe[name='cockpit1:localhost/vgpu-host']", { timeout: TIMEOUT });
            frame = await el.contentFrame();
            await until(frame, "the GPUs table", () => !!document.querySelector("#gpus table"));
        });

        await step("gpus-and-blocker", async () => {
            await until(frame, `row of ${GPU} with its group not viable, blocked by its audio on snd_hda_intel`, g => {
                const row = document.querySelector(`[data-gpu="${g}"]`);
                if (!row)
                    return false;
                const grp = row.querySelector("[data-field=group]").textContent;
                const blk = row.querySelector("[data-field=blockers]").textContent;
                return /not viable/.test(grp) && blk.includes("0000:01:00.1") && blk.includes("snd_hda_intel");
            }, GPU);
            const gpus = await frame.$$eval("[data-gpu]", rs => rs.map(r => r.dataset.gpu));
            for (const want of [GPU, "0000:02:00.0", "0000:03:01.0", BOOT_VGA]) {
                if (!gpus.includes(want))
                    throw new Error(`GPU ${want} of the snapshot: not listed (listed: ${gpus.join(", ")})`);
            }
            await until(frame, "the readiness checks (iommu ok)", () =>
                /ok/.test(document.querySelector("[data-check=iommu]")?.textContent || ""));
        });

        await step("quarantined-listed", async () => {
            await until(frame, "0000:02:00.0 in the quarantined devices, with its problem and the command that lifts it, and marked in its GPU row", () => {
                const t = document.querySelector('[data-quarantined="0000:02:00.0"]')?.textContent || "";
                return t.includes("config-space: config space reads all ones") && t.includes("after destroy train-02") &&
                    t.includes("vgpu-host host release-quarantine 0000:02:00.0") &&
                    !!document.querySelector('[data-gpu="0000:02:00.0"] [data-field=quarantined]');
            });
            await frame.$eval("#quarantine", e => e.scrollIntoView());
        });

        await step("bind-dry-run", async () => {
            const btn = await frame.$(`button[aria-label="Bind IOMMU group 10 of ${GPU} to vfio-pci"]`);
            if (!btn)
                throw new Error(`the Bind group button of ${GPU}: missing`);
            await btn.click();
            await until(frame, "the dry run's exact writes in the dialog", () => {
                const t = document.querySelector("#bind-steps")?.textContent || "";
                return t.includes("0000:01:00.0/driver_override ← vfio-pci") && t.includes("drivers/snd_hda_intel/unbind ← 0000:01:00.1");
            });
        });

        await step("bind-confirmed-group-viable", async () => {
            await frame.click("#bind-confirm");
            await until(frame, "the dialog closed", () => !document.querySelector("#bind-dialog"));
            await until(frame, `${GPU} on vfio-pci, its group viable with no blocker`, g => {
                const row = document.querySelector(`[data-gpu="${g}"]`);
                if (!row)
                    return false;
                const grp = row.querySelector("[data-field=group]").textContent;
                return row.querySelector("[data-field=driver]").textContent === "vfio-pci" &&
                    /viable/.test(grp) && !/not viable/.test(grp) && row.querySelector("[data-field=blockers]").textContent === "—";
            }, GPU);
        });

        await step("unbind-restores", async () => {
            await frame.click(`button[aria-label="Unbind IOMMU group 10 of ${GPU} from vfio-pci"]`);
            await until(frame, "the unbind dry run's writes (the audio back to snd_hda_intel)", () =>
                (document.querySelector("#bind-steps")?.textContent || "").includes("0000:01:00.1"));
            await frame.click("#bind-confirm");
            await until(frame, `${GPU}'s group blocked again by its audio on snd_hda_intel`, g => {
                const row = document.querySelector(`[data-gpu="${g}"]`);
                return row && !document.querySelector("#bind-dialog") && /not viable/.test(row.querySelector("[data-field=group]").textContent) &&
                    row.querySelector("[data-field=blockers]").textContent.includes("snd_hda_intel");
            }, GPU);
        });

        const typeRow = `[data-parent="mbochs"] [data-type="mbochs-small"]`;
        let uuid;
        await step("mdev-created", async () => {
            const free = await frame.$eval(`${typeRow} [data-field=free]`, e => e.textContent).catch(() => {
                throw new Error("the vGPU type mbochs-small of parent mbochs: not listed");
            });
            await frame.click(`${typeRow} button[aria-label^="Create"]`);
            await until(frame, "one mbochs-small instance, one fewer free", ([sel, before]) => {
                const r = document.querySelector(sel);
                return r && r.querySelectorAll("[data-instance]").length === 1 &&
                    r.querySelector("[data-field=free]").textContent === String(Number(before) - 1);
            }, [typeRow, free]);
            uuid = await frame.$eval(`${typeRow} [data-instance]`, e => e.dataset.instance);
        });

        await step("mdev-removed", async () => {
            await frame.click(`button[aria-label="Remove vGPU instance ${uuid}"]`);
            await until(frame, `instance ${uuid} gone`, ([sel, u]) => {
                const r = document.querySelector(sel);
                return r && !r.querySelector(`[data-instance="${u}"]`) && r.querySelector("[data-field=used]").textContent === "0";
            }, [typeRow, uuid]);
        });

        const spec = path.join(SHOTS, "..", "web-vm.yaml");
        fs.writeFileSync(spec, `apiVersion: vgpu-host/v1
kind: VirtualMachine
metadata:
  name: web-vm
spec:
  vcpus: 1
  memory: 512MiB
  firmware: bios
  virtType: qemu
  disks:
    - name: root
      path: ${VM_DISK}
      format: qcow2
  network:
    type: none
  graphics:
    type: vnc
  gpus:
    - passthrough:
        address: "${GPU}"
`);
        await step("spec-planned", async () => {
            const input = await frame.$("#spec-file");
            await input.uploadFile(spec);
            await until(frame, "the uploaded spec in the text area", () => document.querySelector("#spec-text").value.includes("name: web-vm"));
            await frame.click("#spec-plan");
            await until(frame, "the plan (define domain web-vm)", () =>
                (document.querySelector("#spec-plan-output")?.textContent || "").includes("define domain web-vm"));
        });

        await step("spec-applied", async () => {
            await frame.click("#spec-apply");
            await until(frame, "VM web-vm running with the GPU allocated", () => {
                const r = document.querySelector('[data-vm="web-vm"]');
                return r && r.querySelector("[data-field=state]").textContent === "running" && r.textContent.includes("0000:01:00.0");
            });
        });

        await step("vm-destroyed", async () => {
            await frame.click('button[aria-label="Destroy VM web-vm"]');
            await until(frame, "the destroy dialog listing the GPU it releases", () =>
                (document.querySelector("#destroy-dialog")?.textContent || "").includes("pci 0000:01:00.0"));
            await frame.click("#destroy-confirm");
            await until(frame, "VM web-vm gone", () => !document.querySelector('[data-vm="web-vm"]') && !!document.querySelector("#notice"));
        });

        await step("boot-vga-refused", async () => {
            await frame.click(`button[aria-label="Bind IOMMU group 1 of ${BOOT_VGA} to vfio-pci"]`);
            await until(frame, "the agent's refusal of the boot VGA, as worded, and no confirm", () => {
                const t = document.querySelector("#bind-dialog .vgpu-error")?.textContent || "";
                const confirm = document.querySelector("#bind-confirm");
                return t.includes("refused by a safety check") && t.includes("[boot-vga] 0000:00:02.0: is the boot VGA") &&
                    t.includes("exit 4") && confirm && confirm.disabled;
            });
        });

        await step("keyboard-and-labels", async () => {
            await page.keyboard.press("Escape");
            await until(frame, "the dialog closed with Escape", () => !document.querySelector("#bind-dialog"));
            const unlabelled = await frame.evaluate(() => {
                const bad = [];
                for (const e of document.querySelectorAll("input, textarea, select, button")) {
                    const name = e.getAttribute("aria-label") || e.labels?.[0]?.textContent || (e.tagName === "BUTTON" && e.textContent.trim());
                    if (!name)
                        bad.push(e.outerHTML.slice(0, 80));
                }
                return bad;
            });
            if (unlabelled.length)
                throw new Error(`controls without an accessible name: ${unlabelled.join(" | ")}`);
            // Tab reaches a Bind button: every action is a real button in the tab order.
            let found = false;
            for (let i = 0; i < 60 && !found; i++) {
                await page.keyboard.press("Tab");
                found = await frame.evaluate(() => /^(Bind|Unbind) IOMMU group/.test(document.activeElement?.getAttribute("aria-label") || ""));
            }
            if (!found)
                throw new Error("Tab never reached a Bind/Unbind group button");
        });

        await step("agent-not-running", async () => {
            process.kill(AGENT_PID, "SIGTERM");
            await until(frame, "the message that the agent is not running", () => {
                const e = document.querySelector("#agent-down");
                return e && e.dataset.reason === "down" && e.textContent.includes("The vgpu-host agent is not running");
            });
        });

        if (!process.env.H200_ROOT) {
            console.error("SKIP socket-keeps-non-member-out and agent-back-mig-from-h200-capture: the shared fixture is missing (run.sh said so)");
        } else {
            const startAgent2 = group => {
                const log = fs.openSync(env("AGENT2_LOG"), "a");
                const a = spawn(env("AGENT_BIN"), ["agent", "--host-root", process.env.H200_ROOT, "--socket", env("AGENT_SOCKET"),
                    "--group", group, "--connect", `vgpu-fake://${process.env.H200_ROOT}/libvirt.json`], {
                    env: { ...process.env, VGPU_HOST_NVML_FACTS: env("NVML_FACTS"), VGPU_HOST_NVML_HELPER: env("NVML_HELPER") },
                    stdio: ["ignore", "ignore", log],
                });
                fs.writeFileSync(env("AGENT2_PIDFILE"), String(a.pid));
                return a;
            };
            const stopAgent2 = () => new Promise(resolve => {
                agent2.once("exit", resolve);
                agent2.kill("SIGTERM");
            }).then(() => { agent2 = null });

            await step("socket-keeps-non-member-out", async () => {
                // An agent whose socket is root's only (--group ''): this login is not let in,
                // and the page says so, with the fix, instead of "not running".
                agent2 = startAgent2("");
                await until(frame, "the page saying the socket keeps this user out, naming the user in the fix", u => {
                    const e = document.querySelector("#agent-down");
                    return e && e.dataset.reason === "denied" && e.textContent.includes("keeps you out") && e.textContent.includes(`usermod -aG vgpu-host ${u}`);
                }, USER);
                await stopAgent2();
            });

            await step("agent-back-mig-from-h200-capture", async () => {
                // A new agent on the same socket, serving the H200 capture: the page finds it by
                // itself (it keeps polling) and shows the GPU's MIG profiles from NVML's answers.
                agent2 = startAgent2(USER);
                await until(frame, "the H200's MIG section: MIG off, the 7g.141gb and 1g.18gb profiles with their free placements", () => {
                    const g = document.querySelector('[data-mig-gpu="0000:00:06.0"]');
                    const t = g?.textContent || "";
                    return !document.querySelector("#agent-down") && t.includes("NVIDIA H200") && t.includes("MIG off") &&
                        t.includes("7g.141gb") && t.includes("1g.18gb");
                });
                await frame.$eval("#mig", e => e.scrollIntoView());
            });
        }
    } finally {
        if (agent2)
            agent2.kill("SIGTERM");
        await browser.close();
    }
    console.log(`browser.test: ${n} steps passed in ${((Date.now() - t0) / 1000).toFixed(1)} s; screenshots in ${SHOTS}`);
}

main().catch(() => process.exit(1));

/* global cockpit */
// The Cockpit page "GPUs": the host as the vgpu-host agent sees it, live, and its changes
// (bind/unbind a group, mdev instances, VM specs) through the agent's typed requests.
import React, { useCallback, useEffect, useRef, useState } from "react";
import { createRoot } from "react-dom/client";
import {
    Alert, Button, Card, CardBody, CardTitle, CodeBlock, CodeBlockCode, EmptyState, EmptyStateBody,
    EmptyStateHeader, Form, FormGroup, Label, List, ListItem, Modal, Page, PageSection, TextArea,
    TextInput, Title, Flex, FlexItem,
} from "@patternfly/react-core";
import "@patternfly/react-core/dist/styles/base.css";
import "./index.css";
import { AgentError, EXIT_MEANING, exec, request, run, socketPath } from "./agent.js";

const REFRESH_MS = 5000;

function verdictColor(v) {
    return { ok: "green", warn: "orange", fail: "red" }[v] || "grey";
}

function fmtSize(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1 && n % 1024 === 0) {
        n /= 1024;
        i++;
    }
    return `${n} ${units[i]}`;
}

// ErrorText shows an agent's or a command's error as it is worded: every line kept.
function ErrorText({ title, error }) {
    if (!error)
        return null;
    const code = error.exitCode;
    const head = code ? `${title} (exit ${code}: ${EXIT_MEANING[code] || "error"})` : title;
    return (
        <Alert variant="danger" isInline title={head} role="alert" className="vgpu-error">
            <pre className="vgpu-pre">{error.message}</pre>
        </Alert>
    );
}

function Section({ id, title, children, actions }) {
    return (
        <Card id={id} component="section" aria-labelledby={id + "-title"} className="vgpu-section">
            <CardTitle>
                <Flex justifyContent={{ default: "justifyContentSpaceBetween" }}>
                    <FlexItem><Title headingLevel="h2" size="lg" id={id + "-title"}>{title}</Title></FlexItem>
                    {actions && <FlexItem>{actions}</FlexItem>}
                </Flex>
            </CardTitle>
            <CardBody>{children}</CardBody>
        </Card>
    );
}

function Readiness({ health, check }) {
    return (
        <Section id="readiness" title="Readiness">
            <p id="agent-health">
                Agent: {health?.ready ? <Label color="green">ready</Label> : <Label color="orange">not ready</Label>}
                {health?.reason && <> {health.reason}</>}
                {" "}libvirt: {health?.libvirt || "unknown"}; drift: {health?.drifts ?? 0}
            </p>
            {check && (
                <table className="pf-v5-c-table pf-m-compact" aria-label="Host readiness checks">
                    <thead><tr><th scope="col">check</th><th scope="col">verdict</th><th scope="col">detail</th><th scope="col">fix</th></tr></thead>
                    <tbody>
                        {(check.checks || []).map(c => (
                            <tr key={c.name} data-check={c.name}>
                                <td>{c.name}</td>
                                <td><Label color={verdictColor(c.verdict)}>{c.verdict}</Label></td>
                                <td>{c.detail}</td>
                                <td>{c.fix}</td>
                            </tr>
                        ))}
                    </tbody>
                </table>
            )}
        </Section>
    );
}

function GPUs({ inv, busy, onBind }) {
    const groups = new Map((inv.groups || []).map(g => [g.id, g]));
    const gpus = (inv.devices || []).filter(d => d.is_gpu);
    const quarantined = new Set((inv.quarantined || []).map(q => q.address));
    if (gpus.length === 0)
        return <Section id="gpus" title="GPUs"><p>No GPU on this host.</p></Section>;
    return (
        <Section id="gpus" title="GPUs">
            <table className="pf-v5-c-table pf-m-compact" aria-label="GPUs and their IOMMU groups">
                <thead>
                    <tr>
                        <th scope="col">address</th><th scope="col">device</th><th scope="col">driver</th>
                        <th scope="col">IOMMU group</th><th scope="col">companions</th><th scope="col">blockers</th>
                        <th scope="col">NUMA</th><th scope="col">BARs</th><th scope="col"><span className="pf-v5-screen-reader">actions</span></th>
                    </tr>
                </thead>
                <tbody>
                    {gpus.map(d => {
                        const g = groups.get(d.iommu_group);
                        const companions = g ? g.members.filter(m => m.address !== d.address && !m.is_bridge) : [];
                        const allVFIO = g && g.members.filter(m => !m.is_bridge).every(m => m.driver === "vfio-pci");
                        return (
                            <tr key={d.address} data-gpu={d.address}>
                                <td>
                                    {d.address}{d.boot_vga && <> <Label color="blue">boot VGA</Label></>}
                                    {quarantined.has(d.address) && <> <Label color="red" data-field="quarantined">quarantined</Label></>}
                                </td>
                                <td>{[d.vendor_name, d.device_name].filter(Boolean).join(" ") || `${d.vendor_id}:${d.device_id}`}</td>
                                <td data-field="driver">{d.driver || "(none)"}</td>
                                <td data-field="group">
                                    {d.iommu_group >= 0 ? d.iommu_group : "none"}{" "}
                                    {g && (g.viable ? <Label color="green">viable</Label> : <Label color="red">not viable</Label>)}
                                </td>
                                <td>{companions.map(m => `${m.address} (${m.driver || "no driver"})`).join(", ") || "—"}</td>
                                <td data-field="blockers">
                                    {g && g.blockers.length > 0
                                        ? <ul className="vgpu-list">{g.blockers.map(b => <li key={b.address}>{b.address}: {b.reason}</li>)}</ul>
                                        : "—"}
                                </td>
                                <td>{d.numa_node >= 0 ? d.numa_node : "—"}</td>
                                <td>{(d.bars || []).filter(b => !b.io).map(b => `${b.index}: ${fmtSize(b.size)}${b.is64 ? " 64-bit" : ""}${b.prefetchable ? " pref" : ""}`).join(", ")}</td>
                                <td>
                                    {allVFIO
                                        ? <Button variant="secondary" isDisabled={busy} aria-label={`Unbind IOMMU group ${d.iommu_group} of ${d.address} from vfio-pci`} onClick={() => onBind("unbind", d)}>Unbind group</Button>
                                        : <Button variant="primary" isDisabled={busy || d.iommu_group < 0} aria-label={`Bind IOMMU group ${d.iommu_group} of ${d.address} to vfio-pci`} onClick={() => onBind("bind", d)}>Bind group</Button>}
                                </td>
                            </tr>
                        );
                    })}
                </tbody>
            </table>
        </Section>
    );
}

function MdevParents({ inv, busy, onCreate, onRemove }) {
    const [counts, setCounts] = useState({});
    const parents = inv.mdev_parents || [];
    return (
        <Section id="vgpu" title="vGPU parents">
            {parents.length === 0 && <p>No mdev or vendor vGPU parent on this host.</p>}
            {parents.map(p => (
                <div key={p.parent} className="vgpu-parent" data-parent={p.parent}>
                    <Title headingLevel="h3" size="md">{p.parent}</Title>
                    <table className="pf-v5-c-table pf-m-compact" aria-label={`vGPU types of ${p.parent}`}>
                        <thead><tr><th scope="col">type</th><th scope="col">description</th><th scope="col">used</th><th scope="col">free</th><th scope="col">instances</th><th scope="col">create</th></tr></thead>
                        <tbody>
                            {p.types.map(t => {
                                const key = `${p.parent}/${t.id}`;
                                const inputId = `count-${p.parent}-${t.id}`;
                                return (
                                    <tr key={t.id} data-type={t.id}>
                                        <td>{t.id}{t.name && t.name !== t.id && <> ({t.name})</>}</td>
                                        <td>{t.description || "—"}</td>
                                        <td data-field="used">{(t.instances || []).length}</td>
                                        <td data-field="free">{t.available_instances}</td>
                                        <td>
                                            {(t.instances || []).length === 0 ? "—" : (
                                                <ul className="vgpu-list">
                                                    {t.instances.map(u => (
                                                        <li key={u} data-instance={u}>
                                                            <code>{u}</code>{" "}
                                                            <Button variant="link" isInline isDisabled={busy} aria-label={`Remove vGPU instance ${u}`} onClick={() => onRemove(u)}>Remove</Button>
                                                        </li>
                                                    ))}
                                                </ul>
                                            )}
                                        </td>
                                        <td>
                                            <Flex spaceItems={{ default: "spaceItemsSm" }} flexWrap={{ default: "nowrap" }}>
                                                <label htmlFor={inputId} className="pf-v5-screen-reader">instances of {t.id} to create</label>
                                                <TextInput id={inputId} type="number" min={1} max={Math.max(1, t.available_instances)} className="vgpu-count"
                                                           value={counts[key] ?? 1} onChange={(_e, v) => setCounts({ ...counts, [key]: v })} />
                                                <Button variant="secondary" isDisabled={busy || t.available_instances < 1} aria-label={`Create ${counts[key] ?? 1} instance(s) of ${t.id} on ${p.parent}`}
                                                        onClick={() => onCreate(p.parent, t.id, parseInt(counts[key] ?? 1, 10))}>Create</Button>
                                            </Flex>
                                        </td>
                                    </tr>
                                );
                            })}
                        </tbody>
                    </table>
                </div>
            ))}
        </Section>
    );
}

function MIG({ mig }) {
    return (
        <Section id="mig" title="MIG">
            {!mig && <p>No NVIDIA GPU with MIG on this host.</p>}
            {mig && !mig.available && <p>MIG unknown: {mig.note}</p>}
            {mig && mig.available && (mig.gpus || []).map(g => (
                <div key={g.address} data-mig-gpu={g.address}>
                    <Title headingLevel="h3" size="md">{g.address} {g.name} — MIG {g.mig_enabled ? "on" : "off"}{g.mig_pending !== g.mig_enabled && " (change pending a GPU reset)"}</Title>
                    <p>Instances: {(g.instances || []).length === 0 ? "none" : g.instances.map(i => `${i.profile} #${i.id} at ${i.placement.start}+${i.placement.size}`).join(", ")}</p>
                    <table className="pf-v5-c-table pf-m-compact" aria-label={`Free MIG placements of ${g.address}`}>
                        <thead><tr><th scope="col">profile</th><th scope="col">free placements</th><th scope="col">more that fit</th></tr></thead>
                        <tbody>
                            {(g.free || []).map(f => (
                                <tr key={f.profile}><td>{f.profile}</td><td>{f.placements.map(p => `${p.start}+${p.size}`).join(", ") || "—"}</td><td>{f.fits}</td></tr>
                            ))}
                        </tbody>
                    </table>
                </div>
            ))}
            {mig && mig.source === "cache" && <p className="vgpu-note">From the agent's MIG state cache, {Math.round(mig.age_seconds)} s old.</p>}
        </Section>
    );
}

function VMs({ vms, drift, busy, onDestroy }) {
    const drifted = new Map((drift || []).map(d => [d.vm || d.name, d]));
    return (
        <Section id="vms" title="VMs">
            {vms.length === 0 && <p>No VM applied by vgpu-host.</p>}
            {vms.length > 0 && (
                <table className="pf-v5-c-table pf-m-compact" aria-label="VMs and their allocations">
                    <thead><tr><th scope="col">VM</th><th scope="col">phase</th><th scope="col">state</th><th scope="col">allocations</th><th scope="col">drift</th><th scope="col"><span className="pf-v5-screen-reader">actions</span></th></tr></thead>
                    <tbody>
                        {vms.map(v => (
                            <tr key={v.name} data-vm={v.name}>
                                <td>{v.name}</td>
                                <td>{v.phase}</td>
                                <td data-field="state">{v.state}</td>
                                <td>{(v.claims || []).map(c => `${c.kind} ${c.id}${c.detail ? ` (${c.detail})` : ""}`).join(", ") || "—"}</td>
                                <td>{drifted.has(v.name) ? <Label color="red">{drifted.get(v.name).reason || drifted.get(v.name).kind || "drift"}</Label> : "—"}</td>
                                <td><Button variant="danger" isDisabled={busy} aria-label={`Destroy VM ${v.name}`} onClick={() => onDestroy(v.name)}>Destroy</Button></td>
                            </tr>
                        ))}
                    </tbody>
                </table>
            )}
            {(drift || []).length > 0 && (
                <List aria-label="Drift">
                    {drift.map((d, i) => <ListItem key={i}>{d.vm}: {d.kind} ({(d.devices || []).join(", ")}): {d.reason}; {d.action}</ListItem>)}
                </List>
            )}
        </Section>
    );
}

function Quarantined({ list }) {
    return (
        <Section id="quarantine" title="Quarantined devices">
            {(list || []).length === 0
                ? <p>None.</p>
                : (
                    <ul className="vgpu-list">
                        {list.map(q => (
                            <li key={q.address} data-quarantined={q.address}>
                                {q.address} since {q.since}{q.op && ` (after ${q.op})`}: {(q.problems || []).map(p => `${p.check}: ${p.detail}`).join("; ")}
                                {" "}— fix the device, then <code>vgpu-host host release-quarantine {q.address}</code>
                            </li>
                        ))}
                    </ul>
                )}
        </Section>
    );
}

// SpecForm: paste or upload a VM spec, plan it (always first), then apply it.
function SpecForm({ busy, setBusy, refresh }) {
    const [text, setText] = useState("");
    const [fileName, setFileName] = useState("vm.yaml");
    const [plan, setPlan] = useState(null);
    const [planned, setPlanned] = useState("");
    const [result, setResult] = useState(null);
    const [error, setError] = useState(null);

    const onFile = e => {
        const f = e.target.files && e.target.files[0];
        if (!f)
            return;
        setFileName(f.name.replace(/[^A-Za-z0-9._-]/g, "_") || "vm.yaml");
        f.text().then(t => { setText(t); setPlan(null); setResult(null); setError(null) });
    };
    const files = () => ({ [fileName]: text });
    const doPlan = async () => {
        setBusy(true); setError(null); setResult(null); setPlan(null);
        try {
            const res = await run("plan", {}, [fileName], files());
            setPlan(res.stdout); setPlanned(text);
        } catch (e) {
            setError(e);
        } finally { setBusy(false) }
    };
    const doApply = async () => {
        setBusy(true); setError(null);
        try {
            const res = await run("apply", {}, [fileName], files());
            setResult(res.stdout); setPlan(null);
        } catch (e) {
            setError(e);
        } finally { setBusy(false); refresh() }
    };
    return (
        <Section id="apply" title="Apply a VM spec">
            <Form onSubmit={e => { e.preventDefault(); doPlan() }}>
                <FormGroup label="VM spec (YAML)" fieldId="spec-text">
                    <TextArea id="spec-text" value={text} onChange={(_e, v) => { setText(v); setPlan(null); setResult(null) }}
                              rows={10} resizeOrientation="vertical" className="vgpu-mono" aria-describedby="spec-help" />
                    <p id="spec-help" className="vgpu-note">A vgpu-host/v1 VirtualMachine (docs/spec.md). Plan shows every step apply would take; Apply is offered after a plan of this text.</p>
                </FormGroup>
                <FormGroup label="Or upload a spec file" fieldId="spec-file">
                    <input id="spec-file" type="file" accept=".yaml,.yml,.json" onChange={onFile} />
                </FormGroup>
                <Flex>
                    <Button id="spec-plan" type="submit" variant="secondary" isDisabled={busy || !text.trim()}>Plan</Button>
                    <Button id="spec-apply" variant="primary" isDisabled={busy || plan === null || planned !== text} onClick={doApply}>Apply</Button>
                </Flex>
            </Form>
            {plan !== null && (
                <div id="spec-plan-output" aria-live="polite">
                    <Title headingLevel="h3" size="md">Plan</Title>
                    <CodeBlock><CodeBlockCode>{plan}</CodeBlockCode></CodeBlock>
                </div>
            )}
            {result !== null && (
                <div id="spec-apply-output" aria-live="polite">
                    <Title headingLevel="h3" size="md">Applied</Title>
                    <CodeBlock><CodeBlockCode>{result}</CodeBlockCode></CodeBlock>
                </div>
            )}
            <ErrorText title="The agent refused the spec" error={error} />
        </Section>
    );
}

// BindDialog: the exact writes of --dry-run first, then the change on confirmation.
function BindDialog({ pending, onClose, refresh, setBusy }) {
    const [state, setState] = useState({ phase: "dry-run" });
    const { action, device } = pending;
    useEffect(() => {
        let live = true;
        exec(action, { "dry-run": true, output: "json" }, [device.address]).then(res => {
            if (!live)
                return;
            if (res.exit_code !== 0)
                setState({ phase: "refused", error: { message: (res.stderr || res.stdout).trim(), exitCode: res.exit_code } });
            else
                setState({ phase: "confirm", plan: res.json });
        }, e => live && setState({ phase: "refused", error: e }));
        return () => { live = false };
    }, [action, device.address]);
    const confirm = async () => {
        setState(s => ({ ...s, phase: "running" }));
        setBusy(true);
        try {
            await run(action, {}, [device.address]);
            onClose();
        } catch (e) {
            setState(s => ({ ...s, phase: "refused", error: e }));
        } finally { setBusy(false); refresh() }
    };
    const steps = state.plan?.steps || [];
    const title = `${action === "bind" ? "Bind" : "Unbind"} IOMMU group ${device.iommu_group} (${device.address})`;
    return (
        <Modal id="bind-dialog" title={title} isOpen variant="medium" onClose={onClose}
               actions={[
                   <Button key="confirm" id="bind-confirm" variant="primary" isDisabled={state.phase !== "confirm"} onClick={confirm}>
                       {action === "bind" ? "Bind to vfio-pci" : "Restore the original drivers"}
                   </Button>,
                   <Button key="cancel" variant="link" onClick={onClose}>Cancel</Button>,
               ]}>
            {state.phase === "dry-run" && <p>Asking the agent for the exact writes (--dry-run)…</p>}
            {(state.phase === "confirm" || state.phase === "running") && (
                <>
                    <p>{steps.length === 0 ? "Nothing to change: the group is already as asked." : `These ${steps.length} writes will be made, in this order:`}</p>
                    <ol id="bind-steps" className="vgpu-steps">
                        {steps.map((s, i) => <li key={i}><code>{s.op === "write" ? `${s.path} ← ${s.value}` : `${s.op} ${s.path || ""} ${s.value || ""}`}</code></li>)}
                    </ol>
                    {(state.plan?.devices || []).length > 0 && (
                        <p>Devices: {state.plan.devices.map(d => `${d.address} ${d.from || "(none)"} → ${d.to || "(none)"}`).join("; ")}</p>
                    )}
                </>
            )}
            <ErrorText title="The agent refused" error={state.error} />
        </Modal>
    );
}

// DestroyDialog: destroy has no dry run; what it undoes is the VM's journal, and what it
// releases its allocations, shown before the user confirms.
function DestroyDialog({ vm, onConfirm, onClose }) {
    return (
        <Modal id="destroy-dialog" title={`Destroy VM ${vm.name}`} isOpen variant="small" onClose={onClose}
               actions={[
                   <Button key="confirm" id="destroy-confirm" variant="danger" onClick={onConfirm}>Destroy</Button>,
                   <Button key="cancel" variant="link" onClick={onClose}>Cancel</Button>,
               ]}>
            <p>vgpu-host undoes, newest first, the {vm.journal_steps ?? ""} steps apply took for {vm.name}: the domain is stopped and
                undefined, the volumes and seed apply created are deleted, and these allocations are released:</p>
            <ul className="vgpu-list">
                {(vm.claims || []).map(c => <li key={c.kind + c.id}>{c.kind} {c.id}{c.detail ? ` (${c.detail})` : ""}</li>)}
            </ul>
        </Modal>
    );
}

function App() {
    const [data, setData] = useState(null);
    const [down, setDown] = useState(null);
    const [busy, setBusy] = useState(false);
    const [error, setError] = useState(null);
    const [notice, setNotice] = useState(null);
    const [pending, setPending] = useState(null);
    const [destroying, setDestroying] = useState(null);
    const [userName, setUserName] = useState("USER");
    const timer = useRef(null);

    const refresh = useCallback(async () => {
        try {
            const health = await request("GET", "/v1/health").catch(e => {
                if (e.status === 503)
                    return { ready: false, reason: e.message };
                throw e;
            });
            const [inv, check, status, drift] = await Promise.all([
                request("GET", "/v1/inventory"),
                request("GET", "/v1/check"),
                request("GET", "/v1/status").catch(e => ({ error: e })),
                request("GET", "/v1/drift").catch(() => []),
            ]);
            setData({ health, inv, check, vms: Array.isArray(status) ? status : [], vmsError: status?.error || null, drift: drift || [] });
            setDown(null);
        } catch (e) {
            if (e instanceof AgentError && e.unreachable)
                setDown(e);
            else
                setError(e);
        }
    }, []);

    useEffect(() => {
        cockpit.user().then(u => u && u.name && setUserName(u.name), () => {});
    }, []);

    useEffect(() => {
        refresh();
        timer.current = setInterval(refresh, REFRESH_MS);
        return () => clearInterval(timer.current);
    }, [refresh]);

    const act = async (what, fn) => {
        setBusy(true); setError(null); setNotice(null);
        try {
            await fn();
            setNotice(what);
        } catch (e) {
            setError(e);
        } finally { setBusy(false); refresh() }
    };
    const onCreate = (parent, type, count) => act(`created ${count} instance(s) of ${type} on ${parent}`,
                                                  () => run("mdev create", { parent, type, count }));
    const onRemove = uuid => act(`removed ${uuid}`, () => run("mdev remove", {}, [uuid]));
    const onDestroy = name => act(`destroyed ${name}`, () => run("destroy", {}, [name]));

    if (down) {
        // The bridge could not connect: nobody listens (ENOENT, ECONNREFUSED), or the socket's
        // mode keeps this user out (EACCES: not in the socket's group, no administrative access).
        const denied = down.problem === "access-denied" || /permission denied|not permitted/i.test(down.message);
        return (
            <Page>
                <PageSection>
                    <EmptyState id="agent-down" data-reason={denied ? "denied" : "down"}>
                        <EmptyStateHeader titleText={denied ? "The vgpu-host agent's socket keeps you out" : "The vgpu-host agent is not running"} headingLevel="h1" />
                        <EmptyStateBody>
                            {denied
                                ? <>
                                    <p>The socket <code>{socketPath()}</code> refused this login: {down.message.replace(/\.+$/, "")}.</p>
                                    <p>Changes and reads through the agent need root or membership in the socket's group (<code>vgpu-host</code>, or the agent's <code>--group</code>):
                                        turn on administrative access in Cockpit, or have an administrator run <code>sudo usermod -aG vgpu-host {userName}</code> and log in again.</p>
                                </>
                                : <>
                                    <p>Nothing answers on <code>{socketPath()}</code>: {down.message.replace(/\.+$/, "")}.</p>
                                    <p>Start it with <code>sudo systemctl start vgpu-host-agent.service</code> (or <code>sudo vgpu-host agent</code>).</p>
                                </>}
                            <Button variant="primary" onClick={refresh}>Try again</Button>
                        </EmptyStateBody>
                    </EmptyState>
                </PageSection>
            </Page>
        );
    }
    if (!data)
        return <Page><PageSection><p id="loading">Asking the vgpu-host agent…</p></PageSection></Page>;
    return (
        <Page>
            <PageSection variant="light">
                <Title headingLevel="h1" size="2xl">GPUs</Title>
                <p className="vgpu-note">The host as the vgpu-host agent on <code>{socketPath()}</code> sees it (host root {data.inv.host_root}); refreshed every {REFRESH_MS / 1000} s.</p>
            </PageSection>
            <PageSection>
                <div aria-live="polite">
                    {notice && <Alert id="notice" variant="success" isInline title={notice} />}
                    <ErrorText title="The agent refused" error={error} />
                </div>
                <Readiness health={data.health} check={data.check} />
                <GPUs inv={data.inv} busy={busy} onBind={(action, device) => setPending({ action, device })} />
                <MdevParents inv={data.inv} busy={busy} onCreate={onCreate} onRemove={onRemove} />
                <MIG mig={data.inv.mig} />
                <VMs vms={data.vms} drift={data.drift} busy={busy} onDestroy={name => setDestroying(data.vms.find(v => v.name === name))} />
                {data.vmsError && <ErrorText title="VM status" error={data.vmsError} />}
                <SpecForm busy={busy} setBusy={setBusy} refresh={refresh} />
                <Quarantined list={data.inv.quarantined} />
            </PageSection>
            {destroying && <DestroyDialog vm={destroying} onClose={() => setDestroying(null)}
                                          onConfirm={() => { const n = destroying.name; setDestroying(null); onDestroy(n) }} />}
            {pending && <BindDialog pending={pending} onClose={() => setPending(null)} refresh={refresh} setBusy={setBusy} />}
        </Page>
    );
}

document.addEventListener("DOMContentLoaded", () => {
    cockpit.translate && cockpit.translate();
    createRoot(document.getElementById("app")).render(<App />);
});

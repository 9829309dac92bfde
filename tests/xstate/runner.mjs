// Runs generated chart cases (tests/xstate/xstate_spec.py) in the real xstate, many per process.
// stdin: one JSON case per line {chart, steps, probes}; stdout: one JSON line per case, {steps: [record...]}
// or {fatal: message} when xstate refuses the chart. A record is what the Python side prints for jr2ray:
// value, context, status, output, the action trace of the step and can() for every probe.
import readline from 'node:readline';
import {
  and, assign, cancel, createActor, createMachine, fromPromise, not, or, raise, SimulatedClock, stateIn,
} from 'xstate';

// xstate_node.py passes jr2ray's bound (xstate_jr2ray.MAX_MICROSTEPS): a loop is an error on both sides.
const MAX_ITERATIONS = Number(process.env.JR2RAY_XSTATE_MAX_MICROSTEPS || 100);

const show = (ev) => {
  const v = ev.k ?? ev.output ?? ev.error;
  return v === undefined || v === null ? '-' : String(v);
};

function guard(g) {
  switch (g[0]) {
    case 'ge': return ({ context }) => context[g[1]] >= g[2];
    case 'lt': return ({ context }) => context[g[1]] < g[2];
    case 'ev': return ({ event }) => event.k === g[1];
    case 'in': return stateIn(g[1]);
    case 'not': return not(guard(g[1]));
    case 'and': return and(g[1].map(guard));
    case 'or': return or(g[1].map(guard));
    default: throw new Error(`unknown guard ${JSON.stringify(g)}`);
  }
}

function expr(e) {
  switch (e[0]) {
    case 'add': return ({ context }) => context[e[1]] + e[2];
    case 'ev': return ({ event }) => (typeof event.k === 'number' ? event.k : 0);
    case 'const': return () => e[1];
    default: throw new Error(`unknown expr ${JSON.stringify(e)}`);
  }
}

const evt = (type, k) => (k === null || k === undefined ? { type } : { type, k });

function action(a, sink) {
  switch (a[0]) {
    case 'trace': {
      const tag = a[1];
      return ({ context, event }) => {
        sink.push(`${tag}|${context.n}|${context.m}|${context.v}|${event.type}|${show(event)}`);
      };
    }
    case 'asg': {
      const parts = a[2].map(([k, e]) => [k, expr(e)]);
      if (a[1] === 'obj') return assign(Object.fromEntries(parts));
      return assign((args) => Object.fromEntries(parts.map(([k, f]) => [k, f(args)])));
    }
    case 'raise': return raise(evt(a[1], a[2]));
    case 'draise': return raise(evt(a[1], a[2]), a[4] == null ? { delay: a[3] } : { delay: a[3], id: a[4] });
    case 'cancel': return cancel(a[1]);
    default: throw new Error(`unknown action ${JSON.stringify(a)}`);
  }
}

function transitions(ts, sink) {
  return ts.map((t) => {
    const out = {};
    if (t.target !== null && t.target !== undefined) out.target = t.target;
    if (t.guard) out.guard = guard(t.guard);
    if (t.actions && t.actions.length) out.actions = t.actions.map((a) => action(a, sink));
    if (t.reenter) out.reenter = true;
    return out;
  });
}

function state(n, sink) {
  const c = {};
  if (n.id) c.id = n.id;
  if (n.type === 'history') {
    c.type = 'history';
    c.history = n.history;
    if (n.target) c.target = n.target;
    return c;
  }
  if (n.type === 'parallel' || n.type === 'final') c.type = n.type;
  if (n.initial) c.initial = n.initial;
  if (n.states) c.states = Object.fromEntries(n.states.map((s) => [s.key, state(s, sink)]));
  if (n.entry) c.entry = n.entry.map((a) => action(a, sink));
  if (n.exit) c.exit = n.exit.map((a) => action(a, sink));
  if (n.on && n.on.length) c.on = Object.fromEntries(n.on.map(([d, ts]) => [d, transitions(ts, sink)]));
  if (n.always) c.always = transitions(n.always, sink);
  if (n.after) c.after = Object.fromEntries(n.after.map(([d, ts]) => [String(d), transitions(ts, sink)]));
  if (n.onDone) c.onDone = transitions(n.onDone, sink);
  if (n.invoke) {
    const inv = n.invoke;
    const input = inv.input[0] === 'ctx' ? (({ context }) => context[inv.input[1]]) : inv.input[1];
    c.invoke = { src: 'p', input };
    if (inv.id) c.invoke.id = inv.id;
    if (inv.onDone) c.invoke.onDone = transitions(inv.onDone, sink);
    if (inv.onError) c.invoke.onError = transitions(inv.onError, sink);
  }
  if (n.output) c.output = n.output[0] === 'ctx' ? (({ context }) => context[n.output[1]]) : n.output[1];
  return c;
}

function machineFor(spec, sink, pending) {
  const config = state(spec.root, sink);
  config.id = spec.id;
  config.context = { ...spec.context };
  config.options = { maxIterations: MAX_ITERATIONS };
  if (spec.output) config.output = ({ context, event }) => ({ n: context.n, o: event.output ?? null });
  const p = fromPromise(({ input, self }) => new Promise((res, rej) => {
    if (!pending.has(self.id)) pending.set(self.id, []);
    pending.get(self.id).push({ res, rej, input });
  }));
  return createMachine(config, { actors: { p } });
}

function record(actor, probes, sink) {
  const s = actor.getSnapshot();
  const trace = sink.splice(0);
  // Only the status is compared on error; `note` says why, for a reader.
  if (s.status === 'error') return { status: 'error', note: String(s.error && s.error.message).slice(0, 160) };
  return {
    value: s.value,
    context: s.context,
    status: s.status,
    output: s.output ?? null,
    trace,
    // can() on a snapshot that is not active is one of the documented differences: never probed.
    can: s.status === 'active' ? probes.map((ev) => s.can(ev)) : null,
  };
}

const tick = () => new Promise((r) => setImmediate(r));

async function runCase(c) {
  const sink = [];
  const pending = new Map();
  const clock = new SimulatedClock();
  const actor = createActor(machineFor(c.chart, sink, pending), { clock });
  actor.subscribe({ error: () => {} });
  actor.start();
  const out = [record(actor, c.probes, sink)];
  for (const step of c.steps) {
    if (out[out.length - 1].status !== 'active') break;
    if (step[0] === 'send') {
      actor.send(step[1]);
    } else if (step[0] === 'advance') {
      // 1 ms at a time, so a timer scheduled by a timer's transition starts when that timer fired.
      for (let i = 0; i < step[1]; i += 1) clock.increment(1);
    } else {
      // Only the newest child under that id settles. xstate keeps an older one running when a state is entered
      // again without being exited (a history default pointing at the source); jr2ray holds one child per id.
      const waiting = pending.get(step[1]) || [];
      pending.delete(step[1]);
      const w = waiting[waiting.length - 1];
      if (w) (step[0] === 'resolve' ? w.res : w.rej)(w.input * 10 + step[2]);
      await tick();
    }
    out.push(record(actor, c.probes, sink));
  }
  actor.stop();
  return { steps: out };
}

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of rl) {
  if (!line.trim()) continue;
  let result;
  try {
    result = await runCase(JSON.parse(line));
  } catch (err) {
    result = { fatal: String(err && err.stack ? err.stack : err) };
  }
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

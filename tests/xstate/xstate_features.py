"""Which corners of the issue's "Cover, at least" list a generated case exercises, so the tier can show (and
check) that its random charts keep covering them."""

from __future__ import annotations

from typing import Any

from xstate_spec import Info, _all_transitions, index, resolve

FEATURES = (
    "region_only_some_handle", "forbidden_in_region", "self_target_below_parallel", "ancestor_target_below_parallel",
    "targetless_with_actions", "reenter", "always_in_several_regions", "shallow_history_target",
    "deep_history_target", "history_with_default", "history_without_default", "history_in_parallel_target",
    "multiple_targets", "relative_child_target", "relative_path_target", "raise", "delayed_raise", "cancel",
    "after", "clock_advance", "invoke", "invoke_onDone", "invoke_onError", "promise_resolve", "promise_reject",
    "final_state", "state_onDone", "final_output", "root_output", "wildcard_all", "wildcard_prefix", "guard_not",
    "guard_and", "guard_or", "guard_state_in", "assign_order",
)


def _guards(g: Any) -> list[str]:
    if g is None:
        return []
    if g[0] == "not":
        return ["not", *_guards(g[1])]
    if g[0] in ("and", "or"):
        return [g[0], *(x for sub in g[1] for x in _guards(sub))]
    return [g[0]]


def _below_parallel(info: Info) -> bool:
    return any(a.type == "parallel" for a in info.ancestors())


def _handled(info: Info) -> set[str]:
    return {d for sub in info.subtree() for d, _ts in sub.node.get("on") or []}


def _transition_features(infos: list[Info], src: Info, t: dict[str, Any], out: set[str]) -> None:
    targets = t.get("target")
    acts = t.get("actions") or []
    if targets is None and acts:
        out.add("targetless_with_actions")
    if targets is None and not acts and t.get("guard") is None and _below_parallel(src):
        out.add("forbidden_in_region")
    if t.get("reenter"):
        out.add("reenter")
    for g in _guards(t.get("guard")):
        out.add({"not": "guard_not", "and": "guard_and", "or": "guard_or", "in": "guard_state_in"}.get(g, "guard"))
    for ref in targets or []:
        if ref.startswith("."):
            out.add("relative_child_target")
        elif not ref.startswith("#") and "." in ref:
            out.add("relative_path_target")
        n = resolve(infos, src, ref)
        if n is None:
            continue
        if n is src and _below_parallel(src):
            out.add("self_target_below_parallel")
        if src.is_desc(n) and _below_parallel(src):
            out.add("ancestor_target_below_parallel")
        if n.type == "history":
            out.add("deep_history_target" if n.node["history"] == "deep" else "shallow_history_target")
            out.add("history_with_default" if n.node.get("target") else "history_without_default")
            if n.parent is not None and (n.parent.type == "parallel" or _below_parallel(n.parent)):
                out.add("history_in_parallel_target")
    if targets and len(targets) > 1:
        out.add("multiple_targets")


def _action_features(actions: list[Any], out: set[str]) -> None:
    kinds = [a[0] for a in actions]
    for k in kinds:
        if k in ("raise", "cancel"):
            out.add(k)
        if k == "draise":
            out.add("delayed_raise")
    asg = [a for a in actions if a[0] == "asg"]
    if len(asg) >= 2 or any(len(a[2]) >= 3 for a in asg):
        out.add("assign_order")


def features(case: dict[str, Any]) -> set[str]:
    spec = case["chart"]
    infos = index(spec)
    out: set[str] = set()
    for info in infos:
        n = info.node
        for key in ("entry", "exit"):
            _action_features(n.get(key) or [], out)
        for src, ts in _all_transitions(info):
            for t in ts:
                _transition_features(infos, src, t, out)
                _action_features(t.get("actions") or [], out)
        for d, _ts in n.get("on") or []:
            if d == "*":
                out.add("wildcard_all")
            elif d.endswith(".*"):
                out.add("wildcard_prefix")
        if n.get("after"):
            out.add("after")
        if n.get("invoke"):
            out.add("invoke")
            for key, name in (("onDone", "invoke_onDone"), ("onError", "invoke_onError")):
                if n["invoke"].get(key):
                    out.add(name)
        if info.type == "final":
            out.add("final_state")
            if n.get("output"):
                out.add("final_output")
        if n.get("onDone"):
            out.add("state_onDone")
        if info.type == "parallel":
            regions = info.regions()
            handled = [_handled(r) for r in regions]
            if any(h - other for h in handled for other in handled if other is not h):
                out.add("region_only_some_handle")
            if sum(1 for r in regions if any(x.node.get("always") for x in r.subtree())) >= 2:
                out.add("always_in_several_regions")
    if spec.get("output"):
        out.add("root_output")
    for step in case["steps"]:
        out.add({"advance": "clock_advance", "resolve": "promise_resolve", "reject": "promise_reject"}.get(
            step[0], "send"))
    return out & set(FEATURES)

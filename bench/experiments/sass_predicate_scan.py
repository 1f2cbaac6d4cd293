#!/usr/bin/env python3
"""Predicate liveness over SASS (cuobjdump -sass output), for the code
ptxas emits for a diverged warp's collective operations.

1. For every BRA.DIV (the branch into that code), take the code from its
   target to the unconditional BRA back to the converged path. A predicate
   it writes that is live where it returns (read on some path before being
   written) is a HAZARD when the converged path does not write it, and a
   BOTH-WRITE case to read when both do (their values must agree).
2. Every SHFL that writes a predicate live after it is a SHFL-CLOBBER:
   __shfl_sync has no predicate result, so that code uses it as scratch
   (the clash of bench/results/logs/p6-shuffle-H200-20261126.txt).
3. ACROSS-CALL lists predicates live across a CALL, for reading.

Usage: sass_predicate_scan.py FILE.sass...; exit status 1 when any HAZARD
or SHFL-CLOBBER is found. The SASS: ptxas -c -arch=sm_90a M.ptx (function
by function, as the driver's linker) or without -c (one program), then
cuobjdump -sass.
"""
import re
import sys
from collections import defaultdict

INS = re.compile(r'/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;')
PRED = re.compile(r'!?P[0-6]$')
CARRY = re.compile(r'^(IADD3|IADD|LEA|IMAD|IADD32I|UIADD3)')


def parse(path):
    funcs, cur = {}, None
    for line in open(path, errors='replace'):
        m = re.search(r'Function : (\S+)', line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
            continue
        if cur is None:
            continue
        m = INS.search(line)
        if m:
            cur.append((int(m.group(1), 16), m.group(2)))
    return funcs


def split(text):
    guard = None
    m = re.match(r'^@(!?)(U?P\w+)\s+(.*)$', text)
    if m:
        guard = m.group(2)
        text = m.group(3)
    parts = text.split(None, 1)
    opc = parts[0]
    rest = parts[1] if len(parts) > 1 else ''
    operands = [o.strip().replace('.reuse', '') for o in rest.split(',')] if rest else []
    return guard, opc, operands


def mask_preds(v):
    try:
        m = int(v, 16) if v.startswith('0x') else int(v)
    except ValueError:
        return set(range(7))
    return {'P%d' % b for b in range(7) if m >> b & 1}


def effects(text):
    """(reads, writes, guarded) as sets of predicate names P0-P6."""
    guard, opc, o = split(text)
    reads, writes = set(), set()
    if guard and re.fullmatch(r'P[0-6]', guard):
        reads.add(guard)
    if opc.startswith('R2P'):
        writes |= mask_preds(o[-1])
        return reads, writes, guard is not None
    if opc.startswith('P2R'):
        reads |= mask_preds(o[-1])
        return reads, writes, guard is not None
    dest = set()
    if opc.startswith('VOTE'):
        # VOTE.ANY Rd, Pd, Ps or VOTE.ANY Pd, Ps: the last is the source.
        dest = {k for k in range(len(o) - 1) if PRED.match(o[k]) and not o[k].startswith('!')}
    elif o and PRED.match(o[0]) and not o[0].startswith('!'):
        dest.add(0)
        if len(o) > 1 and PRED.match(o[1]) and not o[1].startswith('!'):
            dest.add(1)
    elif len(o) > 1 and PRED.match(o[1]) and not o[1].startswith('!') and not opc.startswith('SEL'):
        dest.add(1)
        if CARRY.match(opc) and len(o) > 2 and PRED.match(o[2]) and not o[2].startswith('!'):
            dest.add(2)
    for k, x in enumerate(o):
        if x in ('PT', '!PT') or not PRED.match(x):
            continue
        p = x.lstrip('!')
        if k in dest:
            writes.add(p)
        else:
            reads.add(p)
    return reads, writes, guard is not None


def target(o):
    for x in reversed(o):
        if re.fullmatch(r'0x[0-9a-f]+', x):
            return int(x, 16)
    return None


def succs(ins, i, idx):
    a, t = ins[i]
    guard, opc, o = split(t)
    out = []
    nxt = i + 1 if i + 1 < len(ins) else None
    if opc in ('EXIT', 'RET', 'RET.REL', 'RET.REL.NODEC', 'RET.ABS', 'KILL') or opc.startswith('RET'):
        if guard and nxt is not None:
            out.append(nxt)
        return out
    if opc.startswith('BRA'):
        tg = target(o)
        if tg is not None and tg in idx:
            out.append(idx[tg])
        uncond = opc == 'BRA' and guard is None
        if not uncond and nxt is not None:
            out.append(nxt)
        return out
    if nxt is not None:
        out.append(nxt)
    return out


def live_at(ins, start, p, idx, cache):
    """Address of an instruction that reads p on some path from start
    before p is written, or None. A write under a guard covers later reads
    under the same guard, while the guard's predicate is not rewritten."""
    key = (start, p)
    if key in cache:
        return cache[key]
    seen, stack = set(), [(start, frozenset())]
    res = None
    while stack:
        i, cov = stack.pop()
        if (i, cov) in seen:
            continue
        seen.add((i, cov))
        t = ins[i][1]
        r, w, g = effects(t)
        m = re.match(r'^@(!?P[0-6])\s', t)
        gs = m.group(1) if m else None
        if p in r and not (gs is not None and gs in cov):
            res = ins[i][0]
            break
        if p in w and not g:
            continue
        ncov = set(x for x in cov if x.lstrip('!') not in w)
        if p in w and g and gs is not None:
            ncov.add(gs)
        for s2 in succs(ins, i, idx):
            stack.append((s2, frozenset(ncov)))
    cache[key] = res
    return res


def scan(name, ins):
    idx = {a: i for i, (a, _) in enumerate(ins)}
    cache = {}
    found = []
    for i, (a, t) in enumerate(ins):
        guard, opc, o = split(t)
        if opc.startswith('BRA.DIV'):
            tg = target(o)
            if tg not in idx:
                continue
            j = idx[tg]
            fw = set()
            back = None
            while j < len(ins):
                _, tt = ins[j]
                g2, opc2, o2 = split(tt)
                r, w, gg = effects(tt)
                fw |= w
                if opc2 == 'BRA' and g2 is None:
                    back = target(o2)
                    break
                if opc2 == 'EXIT' or opc2.startswith('RET'):
                    break
                j += 1
            if back is None or back not in idx:
                continue
            # converged path: from the BRA.DIV's next instruction to the return point
            mw = set()
            for k in range(i + 1, len(ins)):
                if ins[k][0] >= back:
                    break
                mw |= effects(ins[k][1])[1]
            for p in sorted(fw):
                at = live_at(ins, idx[back], p, idx, cache)
                if at is not None:
                    kind = 'BOTH-WRITE' if p in mw else 'HAZARD'
                    found.append((kind, '%s: BRA.DIV at %04x -> fallback %04x returns to %04x; %s written in fallback, read at %04x' % (name, a, tg, back, p, at)))
        elif opc.startswith('SHFL') and o and re.fullmatch(r'P[0-6]', o[0]) and i + 1 < len(ins):
            # __shfl_sync has no predicate result: a SHFL that writes one
            # (the diverged-warp fallback's) uses it as scratch.
            at = live_at(ins, i + 1, o[0], idx, cache)
            if at is not None:
                found.append(('SHFL-CLOBBER', '%s: %s at %04x writes %s, read at %04x' % (name, opc, a, o[0], at)))
        elif opc.startswith('CALL'):
            if i + 1 < len(ins):
                for p in ('P0', 'P1', 'P2', 'P3', 'P4', 'P5', 'P6'):
                    at = live_at(ins, i + 1, p, idx, cache)
                    if at is not None:
                        found.append(('ACROSS-CALL', '%s: %s live across CALL at %04x (read at %04x)' % (name, p, a, at)))
    return found


def main():
    total = defaultdict(int)
    for path in sys.argv[1:]:
        funcs = parse(path)
        counts = defaultdict(int)
        for name, ins in funcs.items():
            for kind, msg in scan(name, ins):
                counts[kind] += 1
                if kind != 'ACROSS-CALL' or counts[kind] <= 5:
                    print('%s %s: %s' % (kind, path, msg))
        print('%s: %d functions, %s' % (path, len(funcs), dict(counts)))
        for k, v in counts.items():
            total[k] += v
    sys.exit(1 if total['HAZARD'] or total['SHFL-CLOBBER'] else 0)


if __name__ == '__main__':
    main()

"""The instructions one lane runs through a loop of a SASS listing (cuobjdump -sass -fun NAME).

Usage: sass_walk.py LISTING START END DECISIONS. From address START (hex) to END, falls through
every conditional branch except where DECISIONS says: one letter per conditional branch met, in
order, t (taken) or f (not). BRA.DIV is never taken; an unconditional branch always is. Prints how
many instructions were run and the branches on the way. For the 8-bit loop of
adamw_*_q8_exp_avg_sq_uq8_update (RESULTS.md, 2026-11-27) the decisions were: the next block is
loaded (f), the gradient is not scaled (f), the fallback is skipped (t), each state's reciprocal of
its absmax takes the fast path (t, t): "ffttt".
"""
import re,sys
ins=[]
for l in open(sys.argv[1]):
    m=re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(.*?);',l)
    if m: ins.append((int(m.group(1),16),m.group(2).strip()))
idx={a:i for i,(a,_) in enumerate(ins)}
start,end=int(sys.argv[2],16),int(sys.argv[3],16)
# decisions: list of 't'/'f' for each conditional branch encountered in order; default rule
dec=sys.argv[4] if len(sys.argv)>4 else ''
i=idx[start]; n=0; k=0; path=[]
while True:
    a,t=ins[i]; n+=1
    if a==end: break
    if 'BRA' in t and 'BRA.DIV' not in t:
        tg=int(re.search(r'0x([0-9a-f]+)',t).group(1),16)
        if t.startswith('@'):
            d=dec[k] if k<len(dec) else 'f'; k+=1
            path.append((hex(a),t,d, (tg-a)//16))
            if d=='t': i=idx[tg]; continue
        else:
            path.append((hex(a),t,'j',(tg-a)//16)); i=idx[tg]; continue
    if 'CALL' in t: path.append((hex(a),t,'CALL',0))
    i+=1
print("executed",n)
for p in path: print(p)

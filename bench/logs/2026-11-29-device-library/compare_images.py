import re,sys,os,glob
def images(path):
    t=open(path).read(); out={}
    for m in re.finditer(r'const unsigned char (k\w+)\[\] = \{(.*?)\};', t, re.S):
        out[m.group(1)]=bytes(int(x,0) for x in re.findall(r'0x[0-9a-fA-F]+|\d+', m.group(2)))
    return out
same=diff=0
for b in sorted(glob.glob('/tmp/before_imgs/*_images.cpp')):
    name=os.path.basename(b)[:-len('_images.cpp')]
    a='/work/main/build/specs/optgen_%s_generated/%s_images.cpp'%(name,name)
    if not os.path.exists(a): continue
    ib,ia=images(b),images(a)
    for k in ia:
        if k not in ib: print(name,k,'missing before'); continue
        ok = ia[k]==ib[k]
        same+=ok; diff+=not ok
        print(name,k,len(ia[k]),'same' if ok else 'DIFFERENT')
print('same',same,'different',diff)

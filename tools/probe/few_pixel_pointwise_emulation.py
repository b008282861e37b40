"""A numpy emulation of the few-pixel 1x1's indexing (csrc/cuda/depthwise_separable_conv2d_pointwise.cu): the host's split
plan, every copy into NaN-filled shared memory, the mma.sync m16n8k8 fragments as the PTX ISA lays them out, the stores;
checked against a plain product on NCHW, NHWC and strided inputs. A mirror of the kernel, for checking changes to its
indexing on a machine without a GPU; keep the two in step.

    python tools/probe/few_pixel_pointwise_emulation.py
"""
import numpy as np
CT, PT, MS, CP, PP = 64, 64, 128, 132, 72
def cdiv(a,b): return (a+b-1)//b
def plan(C, Cout, P, sms=132):
    tiles = cdiv(Cout,64)*cdiv(P,64); one = 3*sms//tiles
    wanted = max(cdiv(C,128), min(one, cdiv(C,32)))
    sl = cdiv(cdiv(C,wanted),8)*8; return sl, cdiv(C,sl)
def mma(acc, a, b):
    A = np.zeros((16,8)); B = np.zeros((8,8))
    for l in range(32):
        g,t = l//4,l%4
        A[g,t],A[g+8,t],A[g,t+4],A[g+8,t+4] = a[l]; B[t,g],B[t+4,g] = b[l]
    D = A@B
    for l in range(32):
        g,t = l//4,l%4
        acc[l] += [D[g,2*t],D[g,2*t+1],D[g+8,2*t],D[g+8,2*t+1]]
def copy_row(sm, dst, src_buf, src, count, valid, vec):
    step = 4 if vec else 1
    for k in range(0, count, step):
        for j in range(step):
            sm[dst+k+j] = src_buf[src+k+j] if valid else 0.0
def run(N,C,H,W,Cout,fmt,rng):
    P=N*H*W; x=rng.standard_normal((N,C,H,W)); w=rng.standard_normal((Cout,C))
    if fmt=="nhwc": buf=np.ascontiguousarray(x.transpose(0,2,3,1)).ravel(); st=(H*W*C,1,W*C,C); off=0
    elif fmt=="nchw": buf=x.ravel().copy(); st=(C*H*W,H*W,W,1); off=0
    else:
        big=np.zeros((N,C+1,H,2*W)); big[:,1:,:,::2]=x; buf=big.ravel(); st=((C+1)*H*2*W,H*2*W,2*W,2); off=H*2*W
    wbuf=w.ravel()
    sl,splits=plan(C,Cout,P); assert sl%8==0 and sl<=128 and all(z*sl<C for z in range(splits))
    out=np.full((Cout,P),np.nan); partial=np.full((splits,Cout,P),np.nan)
    inner = st[1]==1 and C>1
    wvec = C%4==0
    ivec = inner and C%4==0 and st[0]%4==0 and st[2]%4==0 and st[3]%4==0 and off%4==0
    for bx in range(cdiv(Cout,64)):
     for by in range(cdiv(P,64)):
      for bz in range(splits):
        c0,p0,kb=bx*64,by*64,bz*sl; kc=min(sl,C-kb); kr=8*cdiv(kc,8); nt=cdiv(min(64,P-p0),8)
        smw=np.full(CT*CP,np.nan); smi=np.full(max(PT*CP,MS*PP),np.nan)
        pix=[]
        for tid in range(64):
            p=p0+tid
            if p<P: n=p//(H*W); hw=p-n*H*W; h=hw//W; ww=hw-h*W; pix.append(off+n*st[0]+h*st[2]+ww*st[3])
            else: pix.append(-1)
        for row in range(CT):
            co=c0+row; src=min(co,Cout-1)*C+kb; dst=row*CP
            if wvec: assert src%4==0 and kc%4==0
            copy_row(smw,dst,wbuf,src,kc,co<Cout,wvec); copy_row(smw,dst+kc,wbuf,src,kr-kc,False,False)
        if inner:
            for pixel in range(8*nt):
                at=pix[pixel]; src=max(at,0)+kb; dst=pixel*CP
                if ivec and at>=0: assert src%4==0
                copy_row(smi,dst,buf,src,kc,at>=0,ivec); copy_row(smi,dst+kc,buf,src,kr-kc,False,False)
        else:
            for k in range(kr):
                for pixel in range(8*nt):
                    at=pix[pixel]; v=at>=0 and k<kc
                    smi[k*PP+pixel]=buf[at+(kb+k)*st[1]] if v else 0.0
        for warp in range(4):
            acc=np.zeros((8,32,4))
            for k0 in range(0,kr,8):
                a=[]
                for l in range(32):
                    g,t=l//4,l%4; base=(16*warp+g)*CP+t+k0
                    a.append([smw[base],smw[base+8*CP],smw[base+4],smw[base+8*CP+4]])
                for nn in range(nt):
                    b=[]
                    for l in range(32):
                        g,t=l//4,l%4
                        if inner: base=(8*nn+g)*CP+k0+t; step=4
                        else: base=(k0+t)*PP+8*nn+g; step=4*PP
                        b.append([smi[base],smi[base+step]])
                    mma(acc[nn],a,b)
            for nn in range(8):
              for l in range(32):
                g,t=l//4,l%4
                for e in range(4):
                    co=c0+16*warp+g+8*(e//2); p=p0+8*nn+2*t+e%2
                    if co>=Cout or p>=P: continue
                    if splits==1: out[co,p]=acc[nn][l][e]
                    else: partial[bz,co,p]=acc[nn][l][e]
    if splits>1: out=partial.sum(0)
    ref=w@x.transpose(1,0,2,3).reshape(C,P)
    return sl,splits,np.abs(out-ref).max()
if __name__=="__main__":
  rng=np.random.default_rng(0)
  for case in [(3,522,5,6,257),(1,36,1,7,130),(2,20,3,1,70),(1,12,1,1,65),(1,8,16,16,64),(2,516,3,5,65),(1,516,7,7,70),(1,32,5,5,100)]:
      for fmt in ["nchw","nhwc","strided"]:
          print(case,fmt,run(*case[:4],case[4],fmt,rng))

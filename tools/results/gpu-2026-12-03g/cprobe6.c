/* does cuCtxSynchronize fail while other threads create, use, destroy streams and exit? */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static CUcontext ctx; static CUdeviceptr buf; static volatile int stop;
static int errs[1024], nsync;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static void *syncer(void *a){(void)a; cuCtxSetCurrent(ctx); while(!stop){CUresult r=cuCtxSynchronize(); nsync++; if(r) errs[r<1024?r:1023]++;} return 0;}
static int exit_mode;
static void *worker(void *a){long i=(long)a; cuCtxSetCurrent(ctx); CUstream s; if(cuStreamCreate(&s,CU_STREAM_NON_BLOCKING)) {printf("create failed\n");return 0;}
  for(int k=0;k<50;k++) cuMemsetD8Async(buf+(i%16)*4096,1,4096,s);
  cuStreamSynchronize(s); cuStreamDestroy(s); if(exit_mode) cuCtxSetCurrent(NULL); return 0;}
int main(int argc,char**argv){ exit_mode=argc>1?atoi(argv[1]):0; CUdevice d; cuInit(0); cuDeviceGet(&d,0); cuDevicePrimaryCtxRetain(&ctx,d); cuCtxSetCurrent(ctx); cuMemAlloc(&buf,1<<20);
  pthread_t st; pthread_create(&st,0,syncer,0); double t0=now(); int rounds=0;
  while(now()-t0<5){ pthread_t w[16]; for(long i=0;i<16;i++) pthread_create(&w[i],0,worker,(void*)i); for(int i=0;i<16;i++) pthread_join(w[i],0); rounds++; }
  stop=1; pthread_join(st,0);
  printf("mode %d: %d rounds of 16 threads, %d syncs; errors:", exit_mode, rounds, nsync); int any=0; for(int i=0;i<1024;i++) if(errs[i]){const char*n; cuGetErrorName((CUresult)i,&n); printf(" %s x%d",n,errs[i]); any=1;} printf(any?"\n":" none\n");
  return 0;}

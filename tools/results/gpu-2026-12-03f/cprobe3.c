/* export timing against what the process already holds, and beside a busy GPU */
#include <cuda.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec/1e6;}
static CUmemAllocationProp prop(void){CUmemAllocationProp p={0}; p.type=CU_MEM_ALLOCATION_TYPE_PINNED; p.location.type=CU_MEM_LOCATION_TYPE_DEVICE; p.location.id=0; p.requestedHandleTypes=CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; return p;}
static CUmemAccessDesc acc(void){CUmemAccessDesc a={0}; a.location.type=CU_MEM_LOCATION_TYPE_DEVICE; a.location.id=0; a.flags=CU_MEM_ACCESS_FLAGS_PROT_READWRITE; return a;}
static void timed(const char *tag){
  CUmemAllocationProp p=prop(); printf("%-40s", tag); double se=0,mx=0;
  for(int r=0;r<8;r++){CUmemGenericAllocationHandle h; int fd; double t0=now(); cuMemCreate(&h,64<<20,&p,0); double t1=now();
    cuMemExportToShareableHandle(&fd,h,CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,0); double t2=now(); se+=t2-t1; if(t2-t1>mx)mx=t2-t1; close(fd); cuMemRelease(h);}
  printf(" export mean %.2f max %.2f ms\n", se/8, mx); fflush(stdout);
}
static void hold(int n, int do_export, int do_map){
  CUmemAllocationProp p=prop(); CUmemAccessDesc a=acc();
  for(int i=0;i<n;i++){CUmemGenericAllocationHandle h; cuMemCreate(&h,2<<20,&p,0);
    if(do_export){int fd; cuMemExportToShareableHandle(&fd,h,CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,0);}
    if(do_map){CUdeviceptr va; cuMemAddressReserve(&va,2<<20,0,0,0); cuMemMap(va,2<<20,0,h,0); cuMemSetAccess(va,2<<20,&a,1);}}
}
int main(int argc,char**argv){
  if(argc>1){ /* busy child: memsets of 1 GiB in a loop */
    CUcontext c; CUdevice d; cuInit(0); cuDeviceGet(&d,0); cuDevicePrimaryCtxRetain(&c,d); cuCtxSetCurrent(c);
    CUdeviceptr x; cuMemAlloc(&x,1ull<<30); CUstream s; cuStreamCreate(&s,CU_STREAM_NON_BLOCKING);
    for(;;){ for(int i=0;i<8;i++) cuMemsetD8Async(x,i,1ull<<30,s); cuStreamSynchronize(s);} }
  CUcontext ctx; CUdevice d; cuInit(0); cuDeviceGet(&d,0); cuDevicePrimaryCtxRetain(&ctx,d); cuCtxSetCurrent(ctx);
  timed("fresh process");
  hold(500,0,0); timed("+500 frames created");
  hold(500,1,0); timed("+500 frames created+exported (fds open)");
  hold(500,1,1); timed("+500 created+exported+mapped");
  hold(1000,1,1); timed("+1000 more created+exported+mapped");
  char cmd[512]; snprintf(cmd,sizeof cmd,"%s busy &",argv[0]);
  pid_t kid=fork(); if(!kid){execl(argv[0],argv[0],"busy",(char*)0); _exit(1);}
  sleep(3); timed("beside a process running memsets");
  kill(kid,SIGKILL); waitpid(kid,0,0);
  timed("after it");
  return 0;
}

/* cprobe2.c: cuMemCreate and cuMemExportToShareableHandle of a 64 MiB
 * frame, timed while another process maps and unmaps 16 frames in a loop,
 * then alone. Built on the GPU host with
 *   gcc -O2 -o cprobe2 cprobe2.c -I/usr/local/cuda/include \
 *       -L/usr/local/cuda/lib64/stubs -lcuda */
#include <cuda.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec/1e6;}
static int dev=0;
static void setup(CUcontext *ctx){CUdevice d; cuInit(0); cuDeviceGet(&d,0); cuDevicePrimaryCtxRetain(ctx,d); cuCtxSetCurrent(*ctx);}
static CUmemAllocationProp prop(void){CUmemAllocationProp p={0}; p.type=CU_MEM_ALLOCATION_TYPE_PINNED; p.location.type=CU_MEM_LOCATION_TYPE_DEVICE; p.location.id=dev; p.requestedHandleTypes=CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; return p;}
static void timed(const char *tag){
  CUmemAllocationProp p=prop(); printf("%s:", tag);
  for(int r=0;r<6;r++){CUmemGenericAllocationHandle h; int fd; double t0=now(); cuMemCreate(&h,64<<20,&p,0); double t1=now();
    cuMemExportToShareableHandle(&fd,h,CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,0); double t2=now(); printf(" c%.2f e%.2f",t1-t0,t2-t1); close(fd); cuMemRelease(h);}
  printf("\n"); fflush(stdout);
}
int main(void){
  /* the mapping process is forked before this one touches CUDA */
  pid_t kid=fork();
  if(!kid){ CUcontext c; setup(&c); CUmemAllocationProp p=prop(); CUmemGenericAllocationHandle h[16]; CUdeviceptr va;
    cuMemAddressReserve(&va,16<<21,0,0,0); for(int i=0;i<16;i++) cuMemCreate(&h[i],2<<20,&p,0);
    CUmemAccessDesc a={0}; a.location.type=CU_MEM_LOCATION_TYPE_DEVICE; a.location.id=dev; a.flags=CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for(;;){ for(int i=0;i<16;i++){cuMemMap(va+((size_t)i<<21),2<<20,0,h[i],0); cuMemSetAccess(va+((size_t)i<<21),2<<20,&a,1);} cuMemUnmap(va,16<<21);} }
  sleep(2);
  CUcontext ctx; setup(&ctx);
  timed("beside a mapping process");
  kill(kid,SIGKILL); waitpid(kid,0,0);
  timed("alone");
  return 0;
}

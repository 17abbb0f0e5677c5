/* cprobe.c: cuMemCreate, export to an fd, and map + set access of one
 * frame, timed alone, with two threads doing the same for 2 MiB frames,
 * and with 1000-3000 other frames mapped (in that last part exports fail
 * once the process runs out of descriptors, so its export column is not a
 * measurement). Built on the GPU host with
 *   gcc -O2 -o cprobe cprobe.c -I/usr/local/cuda/include \
 *       -L/usr/local/cuda/lib64/stubs -lcuda -lpthread */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static CUcontext ctx; static int dev = 0; static volatile int stop;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec/1e6;}
static void one(size_t bytes, double *tc, double *te, double *tm){
  CUmemAllocationProp p={0}; p.type=CU_MEM_ALLOCATION_TYPE_PINNED; p.location.type=CU_MEM_LOCATION_TYPE_DEVICE; p.location.id=dev;
  p.requestedHandleTypes=CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h; int fd; CUdeviceptr va;
  double t0=now(); if(cuMemCreate(&h,bytes,&p,0)) {printf("create fail\n");exit(1);}
  double t1=now(); cuMemExportToShareableHandle(&fd,h,CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,0);
  double t2=now(); cuMemAddressReserve(&va,bytes,0,0,0); cuMemMap(va,bytes,0,h,0);
  CUmemAccessDesc a={0}; a.location.type=CU_MEM_LOCATION_TYPE_DEVICE; a.location.id=dev; a.flags=CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  cuMemSetAccess(va,bytes,&a,1); double t3=now();
  if(tc){*tc=t1-t0;*te=t2-t1;*tm=t3-t2;}
  cuMemUnmap(va,bytes); cuMemAddressFree(va,bytes); cuMemRelease(h); close(fd);
}
static void *bg(void *x){(void)x; cuCtxSetCurrent(ctx); while(!stop) one(2<<20,0,0,0); return 0;}
int main(void){
  cuInit(0); CUdevice d; cuDeviceGet(&d,0); cuDevicePrimaryCtxRetain(&ctx,d); cuCtxSetCurrent(ctx);
  size_t sz[]={2<<20,8<<20,64<<20,128<<20,512<<20};
  for(int mode=0;mode<2;mode++){
    pthread_t t[2]; stop=0;
    if(mode) for(int i=0;i<2;i++) pthread_create(&t[i],0,bg,0);
    for(int s=0;s<5;s++){ printf("%s %4zu MiB:", mode?"busy":"alone", sz[s]>>20);
      for(int r=0;r<4;r++){double c,e,m; one(sz[s],&c,&e,&m); printf("  c%.2f e%.2f m%.2f",c,e,m);} printf("\n");}
    if(mode){stop=1; for(int i=0;i<2;i++) pthread_join(t[i],0);}
  }
  /* many frames mapped in this process */
  int N=3000; CUdeviceptr base; cuMemAddressReserve(&base,(size_t)N<<21,0,0,0);
  CUmemAllocationProp p={0}; p.type=CU_MEM_ALLOCATION_TYPE_PINNED; p.location.type=CU_MEM_LOCATION_TYPE_DEVICE; p.location.id=dev;
  p.requestedHandleTypes=CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemAccessDesc a={0}; a.location.type=CU_MEM_LOCATION_TYPE_DEVICE; a.location.id=dev; a.flags=CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  double t0=now();
  for(int i=0;i<N;i++){CUmemGenericAllocationHandle h; int fd; cuMemCreate(&h,2<<20,&p,0); cuMemExportToShareableHandle(&fd,h,CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,0);
    cuMemMap(base+((size_t)i<<21),2<<20,0,h,0); cuMemSetAccess(base+((size_t)i<<21),2<<20,&a,1);
    if(i==999||i==1999||i==2999){ printf("after %d mapped (%.0f ms):", i+1, now()-t0); for(int r=0;r<3;r++){double c,e,m; one(64<<20,&c,&e,&m); printf("  c%.2f e%.2f m%.2f",c,e,m);} printf("\n"); }}
  return 0;
}

/* an independent exporter: times create+export of an 8 MiB frame every 2 ms for argv[1] seconds */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec/1e6;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  double secs=argc>1?atof(argv[1]):20; CUcontext ctx; CUdevice d; cuInit(0); cuDeviceGet(&d,0); cuDevicePrimaryCtxRetain(&ctx,d); cuCtxSetCurrent(ctx);
  CUmemAllocationProp p={0}; p.type=CU_MEM_ALLOCATION_TYPE_PINNED; p.location.type=CU_MEM_LOCATION_TYPE_DEVICE; p.location.id=0; p.requestedHandleTypes=CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  static double v[100000]; int n=0; double end=now()+secs*1e3, t0=now();
  while(now()<end && n<100000){ CUmemGenericAllocationHandle h; int fd; cuMemCreate(&h,8<<20,&p,0); double a=now(); cuMemExportToShareableHandle(&fd,h,CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,0); double e=now()-a; close(fd); cuMemRelease(h);
    if(e>1) printf("  at %.0f ms: export %.2f ms\n", a-t0, e);
    v[n++]=e; usleep(2000);}
  qsort(v,n,sizeof(double),cmp); double s=0; int over=0; for(int i=0;i<n;i++){s+=v[i]; over+=v[i]>1;}
  printf("probe exports: n %d mean %.3f p50 %.3f p99 %.3f max %.3f ms, over 1 ms %d\n",n,s/n,v[n/2],v[n*99/100],v[n-1],over);
  return 0;
}

/* export cost: how it warms up, and beside other driver work (threads, processes) */
#include <cuda.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec/1e6;}
static CUmemAllocationProp prop(void){CUmemAllocationProp p={0}; p.type=CU_MEM_ALLOCATION_TYPE_PINNED; p.location.type=CU_MEM_LOCATION_TYPE_DEVICE; p.location.id=0; p.requestedHandleTypes=CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; return p;}
static CUmemAccessDesc acc(void){CUmemAccessDesc a={0}; a.location.type=CU_MEM_LOCATION_TYPE_DEVICE; a.location.id=0; a.flags=CU_MEM_ACCESS_FLAGS_PROT_READWRITE; return a;}
static CUcontext ctx;
static void setup(void){CUdevice d; cuInit(0); cuDeviceGet(&d,0); cuDevicePrimaryCtxRetain(&ctx,d); cuCtxSetCurrent(ctx);}
static double export_one(size_t bytes, int keep){CUmemAllocationProp p=prop(); CUmemGenericAllocationHandle h; int fd; cuMemCreate(&h,bytes,&p,0); double t0=now();
  cuMemExportToShareableHandle(&fd,h,CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,0); double t=now()-t0; if(!keep){close(fd); cuMemRelease(h);} return t;}
static void timed(const char *tag){ double s=0,mx=0; for(int r=0;r<10;r++){double t=export_one(64<<20,0); s+=t; if(t>mx)mx=t;} printf("%-46s export mean %.3f max %.3f ms\n",tag,s/10,mx); fflush(stdout);}
static volatile int stop;
static void *busy_thread(void *a){(void)a; cuCtxSetCurrent(ctx); while(!stop){double t=export_one(2<<20,0);(void)t;} return 0;}
static void child_loop(int mode){ setup(); CUmemAllocationProp p=prop(); CUmemAccessDesc a=acc(); CUdeviceptr va; cuMemAddressReserve(&va,64<<20,0,0,0);
  for(;;){ if(mode==1){ CUmemGenericAllocationHandle h,h2; int fd; cuMemCreate(&h,2<<20,&p,0); cuMemExportToShareableHandle(&fd,h,CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,0);
      cuMemImportFromShareableHandle(&h2,(void*)(long)fd,CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR); close(fd); cuMemMap(va,2<<20,0,h2,0); cuMemSetAccess(va,2<<20,&a,1); cuMemUnmap(va,2<<20); cuMemRelease(h2); cuMemRelease(h);}
    else if(mode==2){ CUmemGenericAllocationHandle h; cuMemCreate(&h,64<<20,&p,0); cuMemMap(va,64<<20,0,h,0); cuMemSetAccess(va,64<<20,&a,1); cuMemUnmap(va,64<<20); cuMemRelease(h);}
    else { CUcontext c2; CUdevice d; cuDeviceGet(&d,0); cuCtxCreate(&c2,NULL,0,d); cuCtxDestroy(c2); cuCtxSetCurrent(ctx);} } }
int main(int argc,char**argv){
  if(argc>1){ child_loop(atoi(argv[1])); return 0; }
  setup();
  printf("warm-up, 2 MiB frames exported and kept open (ms):"); for(int i=1;i<=700;i++){double t=export_one(2<<20,1); if(i<=4||i%100==0) printf(" #%d %.3f",i,t);} printf("\n");
  timed("after 700 kept");
  pthread_t th[2]; stop=0; for(int i=0;i<2;i++) pthread_create(&th[i],0,busy_thread,0);
  timed("beside 2 threads creating+exporting"); stop=1; for(int i=0;i<2;i++) pthread_join(th[i],0);
  const char *names[]={"","beside a process importing+mapping 2 MiB","beside a process mapping 64 MiB frames","beside a process creating contexts"};
  for(int m=1;m<=3;m++){ pid_t kid=fork(); if(!kid){ char s[4]; snprintf(s,4,"%d",m); execl(argv[0],argv[0],s,(char*)0); _exit(1);} sleep(2); timed(names[m]); kill(kid,SIGKILL); waitpid(kid,0,0);}
  timed("alone again");
  return 0;
}

/*
 * A tiny stand-in for libnvidia-ml.so.1, so the real nvidia-ml-py bindings can be driven on a
 * machine without a GPU. It implements only the entry points Lahar's GPU collector reaches
 * through pynvml, with the ABI of nvml.h (same argument lists, structs and return codes).
 *
 * Values come from a key=value file named by FAKE_NVML_CONFIG, read on every nvmlInit so a
 * test can change it between collectors. Keys (N is the GPU index, 0 or 1):
 *   count=2                      number of GPUs (at most 2)
 *   init_rc=0                    what nvmlInit returns (9 = driver not loaded)
 *   gpuN.name= gpuN.uuid=        strings
 *   gpuN.util=                   GPU utilization percent
 *   gpuN.mem_total= gpuN.mem_used= gpuN.mem_reserved=   bytes
 *   gpuN.power_mw= gpuN.temp=    milliwatts, degrees C
 *   gpuN.compute=pid:bytes,...   compute processes; gpuN.graphics= the same for graphics
 *   gpuN.not_supported=a,b       fields answering NVML_ERROR_NOT_SUPPORTED:
 *                                util, memory, power, temp, processes
 *   processes_v3_missing=1       the _v3 process calls answer NVML_ERROR_FUNCTION_NOT_FOUND,
 *                                as on drivers older than R510
 *
 * Built without a SONAME on purpose: glibc matches a later dlopen("libnvidia-ml.so.1") against
 * the SONAMEs of loaded objects, which would let this fake leak into code that did not ask for it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fake_config.h"

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_FUNCTION_NOT_FOUND 13
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_ERROR_UNKNOWN 999

#define NVML_TEMPERATURE_GPU 0
#define NVML_MEMORY_V2 0x02000028u /* sizeof(nvmlMemory_v2_t) | 2 << 24 */

#define MAX_GPUS 2
#define MAX_PROCS 8
#define TEXT_LEN 96

typedef int nvmlReturn_t;

typedef struct { unsigned int gpu; unsigned int memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
/* nvmlProcessInfo_v2_t and nvmlProcessInfo_t (v3) share this layout. */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct { unsigned int pid; unsigned long long memory; } fake_process;
typedef struct { unsigned int count; fake_process items[MAX_PROCS]; } fake_process_list;

typedef struct fake_gpu {
    char name[TEXT_LEN];
    char uuid[TEXT_LEN];
    unsigned int util;
    unsigned long long mem_total, mem_used, mem_reserved;
    unsigned int power_mw, temp;
    fake_process_list compute, graphics;
    char not_supported[TEXT_LEN];
} fake_gpu;

typedef fake_gpu *nvmlDevice_t;

static fake_gpu gpus[MAX_GPUS];
static unsigned int gpu_count;
static int init_rc;
static int processes_v3_missing;
static int init_refcount;

static void set_defaults(void) {
    memset(gpus, 0, sizeof gpus);
    gpu_count = MAX_GPUS;
    init_rc = NVML_SUCCESS;
    processes_v3_missing = 0;
    for (int i = 0; i < MAX_GPUS; i++) {
        snprintf(gpus[i].name, TEXT_LEN, "Fake GPU %d", i);
        snprintf(gpus[i].uuid, TEXT_LEN, "GPU-00000000-0000-0000-0000-00000000000%d", i);
        gpus[i].mem_total = 16ULL << 30;
    }
}

static void parse_processes(const char *text, fake_process_list *list) {
    list->count = 0;
    const char *cursor = text;
    while (*cursor && list->count < MAX_PROCS) {
        unsigned int pid;
        unsigned long long memory;
        int consumed = 0;
        if (sscanf(cursor, "%u:%llu%n", &pid, &memory, &consumed) != 2) break;
        list->items[list->count].pid = pid;
        list->items[list->count].memory = memory;
        list->count++;
        cursor += consumed;
        if (*cursor == ',') cursor++;
    }
}

static void apply_gpu_key(fake_gpu *gpu, const char *key, const char *value) {
    if (!strcmp(key, "name")) snprintf(gpu->name, TEXT_LEN, "%s", value);
    else if (!strcmp(key, "uuid")) snprintf(gpu->uuid, TEXT_LEN, "%s", value);
    else if (!strcmp(key, "util")) gpu->util = (unsigned int)strtoul(value, NULL, 10);
    else if (!strcmp(key, "mem_total")) gpu->mem_total = strtoull(value, NULL, 10);
    else if (!strcmp(key, "mem_used")) gpu->mem_used = strtoull(value, NULL, 10);
    else if (!strcmp(key, "mem_reserved")) gpu->mem_reserved = strtoull(value, NULL, 10);
    else if (!strcmp(key, "power_mw")) gpu->power_mw = (unsigned int)strtoul(value, NULL, 10);
    else if (!strcmp(key, "temp")) gpu->temp = (unsigned int)strtoul(value, NULL, 10);
    else if (!strcmp(key, "compute")) parse_processes(value, &gpu->compute);
    else if (!strcmp(key, "graphics")) parse_processes(value, &gpu->graphics);
    else if (!strcmp(key, "not_supported")) snprintf(gpu->not_supported, TEXT_LEN, ",%s,", value);
}

static void apply_key(const char *key, const char *value) {
    unsigned int index;
    char field[64];
    if (sscanf(key, "gpu%u.%63s", &index, field) == 2) {
        if (index < MAX_GPUS) apply_gpu_key(&gpus[index], field, value);
    } else if (!strcmp(key, "count")) {
        gpu_count = (unsigned int)strtoul(value, NULL, 10);
        if (gpu_count > MAX_GPUS) gpu_count = MAX_GPUS;
    } else if (!strcmp(key, "init_rc")) {
        init_rc = atoi(value);
    } else if (!strcmp(key, "processes_v3_missing")) {
        processes_v3_missing = atoi(value);
    }
}

static void load_config(void) {
    set_defaults();
    read_fake_config("FAKE_NVML_CONFIG", apply_key);
}

static int unsupported(const fake_gpu *gpu, const char *field) {
    char needle[40];
    snprintf(needle, sizeof needle, ",%s,", field);
    return strstr(gpu->not_supported, needle) != NULL;
}

static nvmlReturn_t check_device(nvmlDevice_t device) {
    if (init_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (device < gpus || device >= gpus + gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_text(const char *text, char *out, unsigned int length) {
    if (out == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, text);
    return NVML_SUCCESS;
}

/* ---- initialisation ---- */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    load_config();
    if (init_rc != NVML_SUCCESS) return init_rc;
    init_refcount++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    if (init_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    init_refcount--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (init_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    return copy_text("550.54.15-fake", version, length);
}

/* ---- devices ---- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (init_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *count = gpu_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (init_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (index >= gpu_count || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    nvmlReturn_t rc = check_device(device);
    return rc != NVML_SUCCESS ? rc : copy_text(device->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    nvmlReturn_t rc = check_device(device);
    return rc != NVML_SUCCESS ? rc : copy_text(device->name, name, length);
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    nvmlReturn_t rc = check_device(device);
    if (rc != NVML_SUCCESS) return rc;
    if (unsupported(device, "util")) return NVML_ERROR_NOT_SUPPORTED;
    utilization->gpu = device->util;
    utilization->memory = device->mem_total ? (unsigned int)(100 * device->mem_used / device->mem_total) : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    nvmlReturn_t rc = check_device(device);
    if (rc != NVML_SUCCESS) return rc;
    if (unsupported(device, "memory")) return NVML_ERROR_NOT_SUPPORTED;
    /* v1 counts reserved memory as used, as the real driver does since R510. */
    memory->total = device->mem_total;
    memory->used = device->mem_used + device->mem_reserved;
    memory->free = device->mem_total - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    nvmlReturn_t rc = check_device(device);
    if (rc != NVML_SUCCESS) return rc;
    if (memory->version != NVML_MEMORY_V2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (unsupported(device, "memory")) return NVML_ERROR_NOT_SUPPORTED;
    memory->total = device->mem_total;
    memory->reserved = device->mem_reserved;
    memory->used = device->mem_used;
    memory->free = device->mem_total - device->mem_used - device->mem_reserved;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    nvmlReturn_t rc = check_device(device);
    if (rc != NVML_SUCCESS) return rc;
    if (unsupported(device, "power")) return NVML_ERROR_NOT_SUPPORTED;
    *power = device->power_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp) {
    nvmlReturn_t rc = check_device(device);
    if (rc != NVML_SUCCESS) return rc;
    if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    if (unsupported(device, "temp")) return NVML_ERROR_NOT_SUPPORTED;
    *temp = device->temp;
    return NVML_SUCCESS;
}

/* ---- processes: the two-call protocol of nvml.h (ask for the size, then fill) ---- */

static nvmlReturn_t list_processes(nvmlDevice_t device, const fake_process_list *list, unsigned int *count,
                                   nvmlProcessInfo_t *infos) {
    nvmlReturn_t rc = check_device(device);
    if (rc != NVML_SUCCESS) return rc;
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (unsupported(device, "processes")) return NVML_ERROR_NOT_SUPPORTED;
    if (*count < list->count || (infos == NULL && list->count > 0)) {
        *count = list->count;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < list->count; i++) {
        infos[i].pid = list->items[i].pid;
        infos[i].usedGpuMemory = list->items[i].memory;
        infos[i].gpuInstanceId = 0xFFFFFFFFu; /* not a MIG device */
        infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    *count = list->count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    if (processes_v3_missing) return NVML_ERROR_FUNCTION_NOT_FOUND;
    return list_processes(device, &device->compute, count, infos);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    return list_processes(device, &device->compute, count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                      nvmlProcessInfo_t *infos) {
    if (processes_v3_missing) return NVML_ERROR_FUNCTION_NOT_FOUND;
    return list_processes(device, &device->graphics, count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *count,
                                                      nvmlProcessInfo_t *infos) {
    return list_processes(device, &device->graphics, count, infos);
}

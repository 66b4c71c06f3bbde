/*
 * A tiny stand-in for Huawei's libdcmi.so with one Ascend NPU (one card, one chip), so the
 * agent's ctypes DCMI code runs against the real C calling convention and struct layouts of
 * dcmi_interface_api.h without an NPU.
 *
 * Values come from a key=value file named by FAKE_DCMI_CONFIG, read on every dcmi_init:
 *   init_rc=0            what dcmi_init returns (e.g. -8005, DCMI_ERR_CODE_INNER_ERR)
 *   card_id=0            the card's id as dcmi_get_card_num_list reports it
 *   chip_type= chip_name= chip_ver=
 *   aicore=              AI Core utilization percent (input_type 2)
 *   hbm_total_mb= hbm_used_mb= hbm_temp=
 *   power_tenths=        power in 0.1 W, as dcmi_get_device_power_info reports it
 *   temp=                chip temperature, degrees C
 *   health=              0 OK, 1 warning, 2 alarm, 3 critical
 *   not_supported=a,b    calls answering DCMI_ERR_CODE_NOT_SUPPORT:
 *                        utilization, hbm, power, temperature, health, chip_info
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fake_config.h"

#define DCMI_OK 0
#define DCMI_ERROR_CODE_BASE (-8000)
#define DCMI_ERR_CODE_INVALID_PARAMETER (DCMI_ERROR_CODE_BASE - 1)
#define DCMI_ERR_CODE_INVALID_DEVICE_ID (DCMI_ERROR_CODE_BASE - 7)
#define DCMI_ERR_CODE_NOT_REDAY (DCMI_ERROR_CODE_BASE - 12)
#define DCMI_ERR_CODE_NOT_SUPPORT (DCMI_ERROR_CODE_BASE - 255)

#define DCMI_UTILIZATION_RATE_AICORE 2
#define MAX_CHIP_NAME_LEN 32
#define TEXT_LEN 96

struct dcmi_chip_info {
    unsigned char chip_type[MAX_CHIP_NAME_LEN];
    unsigned char chip_name[MAX_CHIP_NAME_LEN];
    unsigned char chip_ver[MAX_CHIP_NAME_LEN];
    unsigned int aicore_cnt;
};

struct dcmi_hbm_info {
    unsigned long long memory_size;  /* MB */
    unsigned int freq;               /* MHz */
    unsigned long long memory_usage; /* MB */
    int temp;
    unsigned int bandwith_util_rate;
};

enum dcmi_unit_type { NPU_TYPE = 0, MCU_TYPE = 1, CPU_TYPE = 2, INVALID_TYPE = 0xFF };

static struct {
    int init_rc;
    int card_id;
    char chip_type[MAX_CHIP_NAME_LEN], chip_name[MAX_CHIP_NAME_LEN], chip_ver[MAX_CHIP_NAME_LEN];
    unsigned int aicore;
    unsigned long long hbm_total_mb, hbm_used_mb;
    int hbm_temp;
    int power_tenths;
    int temp;
    unsigned int health;
    char not_supported[TEXT_LEN];
} npu;

static int initialized;

static void set_defaults(void) {
    memset(&npu, 0, sizeof npu);
    snprintf(npu.chip_type, MAX_CHIP_NAME_LEN, "Ascend");
    snprintf(npu.chip_name, MAX_CHIP_NAME_LEN, "910B3");
    snprintf(npu.chip_ver, MAX_CHIP_NAME_LEN, "V1");
    npu.hbm_total_mb = 65536;
}

static void apply_key(const char *key, const char *value) {
    if (!strcmp(key, "init_rc")) npu.init_rc = atoi(value);
    else if (!strcmp(key, "card_id")) npu.card_id = atoi(value);
    else if (!strcmp(key, "chip_type")) snprintf(npu.chip_type, MAX_CHIP_NAME_LEN, "%s", value);
    else if (!strcmp(key, "chip_name")) snprintf(npu.chip_name, MAX_CHIP_NAME_LEN, "%s", value);
    else if (!strcmp(key, "chip_ver")) snprintf(npu.chip_ver, MAX_CHIP_NAME_LEN, "%s", value);
    else if (!strcmp(key, "aicore")) npu.aicore = (unsigned int)strtoul(value, NULL, 10);
    else if (!strcmp(key, "hbm_total_mb")) npu.hbm_total_mb = strtoull(value, NULL, 10);
    else if (!strcmp(key, "hbm_used_mb")) npu.hbm_used_mb = strtoull(value, NULL, 10);
    else if (!strcmp(key, "hbm_temp")) npu.hbm_temp = atoi(value);
    else if (!strcmp(key, "power_tenths")) npu.power_tenths = atoi(value);
    else if (!strcmp(key, "temp")) npu.temp = atoi(value);
    else if (!strcmp(key, "health")) npu.health = (unsigned int)strtoul(value, NULL, 10);
    else if (!strcmp(key, "not_supported")) snprintf(npu.not_supported, TEXT_LEN, ",%s,", value);
}

static void load_config(void) {
    set_defaults();
    read_fake_config("FAKE_DCMI_CONFIG", apply_key);
}

static int unsupported(const char *call) {
    char needle[40];
    snprintf(needle, sizeof needle, ",%s,", call);
    return strstr(npu.not_supported, needle) != NULL;
}

/* Common checks of every per-chip call; returns DCMI_OK when the call may proceed. */
static int check_chip(int card_id, int device_id, const void *out, const char *call) {
    if (!initialized) return DCMI_ERR_CODE_NOT_REDAY;
    if (out == NULL) return DCMI_ERR_CODE_INVALID_PARAMETER;
    if (card_id != npu.card_id || device_id != 0) return DCMI_ERR_CODE_INVALID_DEVICE_ID;
    if (unsupported(call)) return DCMI_ERR_CODE_NOT_SUPPORT;
    return DCMI_OK;
}

int dcmi_init(void) {
    load_config();
    initialized = npu.init_rc == DCMI_OK;
    return npu.init_rc;
}

int dcmi_get_card_num_list(int *card_num, int *card_list, int list_len) {
    if (!initialized) return DCMI_ERR_CODE_NOT_REDAY;
    if (card_num == NULL || card_list == NULL || list_len < 1) return DCMI_ERR_CODE_INVALID_PARAMETER;
    *card_num = 1;
    card_list[0] = npu.card_id;
    return DCMI_OK;
}

int dcmi_get_device_num_in_card(int card_id, int *device_num) {
    if (!initialized) return DCMI_ERR_CODE_NOT_REDAY;
    if (device_num == NULL) return DCMI_ERR_CODE_INVALID_PARAMETER;
    if (card_id != npu.card_id) return DCMI_ERR_CODE_INVALID_DEVICE_ID;
    *device_num = 1;
    return DCMI_OK;
}

int dcmi_get_device_type(int card_id, int device_id, enum dcmi_unit_type *device_type) {
    int rc = check_chip(card_id, device_id, device_type, "device_type");
    if (rc == DCMI_OK) *device_type = NPU_TYPE;
    return rc;
}

int dcmi_get_device_utilization_rate(int card_id, int device_id, int input_type, unsigned int *utilization_rate) {
    int rc = check_chip(card_id, device_id, utilization_rate, "utilization");
    if (rc != DCMI_OK) return rc;
    if (input_type != DCMI_UTILIZATION_RATE_AICORE) return DCMI_ERR_CODE_NOT_SUPPORT;
    *utilization_rate = npu.aicore;
    return DCMI_OK;
}

int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info *hbm_info) {
    int rc = check_chip(card_id, device_id, hbm_info, "hbm");
    if (rc != DCMI_OK) return rc;
    hbm_info->memory_size = npu.hbm_total_mb;
    hbm_info->freq = 1600;
    hbm_info->memory_usage = npu.hbm_used_mb;
    hbm_info->temp = npu.hbm_temp;
    hbm_info->bandwith_util_rate = 0;
    return DCMI_OK;
}

int dcmi_get_device_power_info(int card_id, int device_id, int *power) {
    int rc = check_chip(card_id, device_id, power, "power");
    if (rc == DCMI_OK) *power = npu.power_tenths;
    return rc;
}

int dcmi_get_device_temperature(int card_id, int device_id, int *temperature) {
    int rc = check_chip(card_id, device_id, temperature, "temperature");
    if (rc == DCMI_OK) *temperature = npu.temp;
    return rc;
}

int dcmi_get_device_health(int card_id, int device_id, unsigned int *health) {
    int rc = check_chip(card_id, device_id, health, "health");
    if (rc == DCMI_OK) *health = npu.health;
    return rc;
}

int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info *chip_info) {
    int rc = check_chip(card_id, device_id, chip_info, "chip_info");
    if (rc != DCMI_OK) return rc;
    memset(chip_info, 0, sizeof *chip_info);
    memcpy(chip_info->chip_type, npu.chip_type, MAX_CHIP_NAME_LEN);
    memcpy(chip_info->chip_name, npu.chip_name, MAX_CHIP_NAME_LEN);
    memcpy(chip_info->chip_ver, npu.chip_ver, MAX_CHIP_NAME_LEN);
    chip_info->aicore_cnt = 24;
    return DCMI_OK;
}

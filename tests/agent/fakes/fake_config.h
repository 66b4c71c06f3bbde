/* The fakes' shared configuration reader: `key=value` lines ('#' comments) from the file an
 * environment variable names, re-read at every init so a test can change the fake's answers. */
#ifndef FAKE_CONFIG_H
#define FAKE_CONFIG_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void read_fake_config(const char *environment_variable, void (*apply)(const char *key, const char *value)) {
    const char *path = getenv(environment_variable);
    if (path == NULL) return;
    FILE *file = fopen(path, "r");
    if (file == NULL) return;
    char line[512];
    while (fgets(line, sizeof line, file)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *equals = strchr(line, '=');
        if (line[0] == '#' || equals == NULL) continue;
        *equals = '\0';
        apply(line, equals + 1);
    }
    fclose(file);
}

#endif

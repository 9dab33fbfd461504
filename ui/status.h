/* status.h — the status bar as one styled line: what the agent is doing
 * (reading with a progress bar, t/s and time left; writing with tokens
 * and t/s and a marker while structural sampling is greedy; running a
 * tool; waiting for an answer), the context used, tokens read, queued
 * messages, the thinking mode, the model and the device. Parts that do
 * not fit the width are left out, least important first. No ncurses. */
#ifndef DS4CL_UI_STATUS_H
#define DS4CL_UI_STATUS_H

#include <stdbool.h>
#include <stddef.h>

#include "agent/agent.h"
#include "ui/text.h"

typedef struct {
    agent_status st;
    bool starting;        /* the system prompt is being read */
    bool resumed;         /* … with a saved conversation after it */
    const char *tool;     /* the tool that runs (AGENT_TOOL) */
    size_t queued;        /* messages waiting to be sent */
    ds4_think think;
    const char *model, *device;
    long frame;           /* advances the spinner */
} ui_status_in;

void ui_status_line(const ui_status_in *in, int width, ui_line *out);

/* 950, 12k, 12.3k, 1.2M */
void ui_fmt_count(char *buf, size_t size, double n);
/* 6s, 1m23s, 2h05m */
void ui_fmt_duration(char *buf, size_t size, double seconds);

#endif

#!/bin/bash
printf 'Hello, Harbor!\nTasks are directories.\n' > greeting.txt

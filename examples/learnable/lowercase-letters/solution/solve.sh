#!/bin/bash
printf 'thequickbrownfoxjumpsoverthelazydog'

#!/bin/bash
# makes three of the four files
touch a.txt b.txt c.txt

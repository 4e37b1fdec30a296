#!/bin/bash
echo "hello, harbor" > greeting.txt

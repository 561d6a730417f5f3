package main

// Plugin packages register their types with the profiles registry in init.
import (
	_ "github.com/spillway-llm/spillway/costmodel"
	_ "github.com/spillway-llm/spillway/profiles"
)

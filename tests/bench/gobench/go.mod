module dlockd-gobench

go 1.19

require dlockd v0.0.0

replace dlockd => ../../../client/go

module github.com/bam-go/bam

go 1.26

module github.com/trainscope/trainscope

go 1.26.8

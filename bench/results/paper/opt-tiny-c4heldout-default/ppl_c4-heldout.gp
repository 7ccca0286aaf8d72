set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/paper/opt-tiny-c4heldout-default/ppl_c4-heldout.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (c4-heldout)'
set title 'opt-tiny'
plot 604.1222818860778 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 604.1406408627838
20 604.2209863804333
30 604.4207546799399
40 604.7701571987044
e

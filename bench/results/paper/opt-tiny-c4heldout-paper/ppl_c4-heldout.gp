set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/paper/opt-tiny-c4heldout-paper/ppl_c4-heldout.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (c4-heldout)'
set title 'opt-tiny'
plot 604.1222818860778 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 604.3828016818362
20 604.6262402090989
30 605.0080756064435
40 605.4293866882466
e

set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/opt-tiny-+qk/ppl_wikitext2.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (wikitext2)'
set title 'opt-tiny'
plot 1273.2194605085567 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 1273.8082520753633
20 1277.0284288176708
30 1279.040928932691
40 1281.060697957439
e

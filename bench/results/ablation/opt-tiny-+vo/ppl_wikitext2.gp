set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/opt-tiny-+vo/ppl_wikitext2.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (wikitext2)'
set title 'opt-tiny'
plot 1273.2194605085567 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 1273.3201335442534
20 1277.3964933359011
30 1280.6053366766175
40 1282.2117774887895
e
